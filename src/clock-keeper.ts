/**
 * The daemon's watch on its system clock: asks whether it is synchronised at start and every
 * minute after (src/clock-sync.ts), keeps GNSS time while it is not (src/gnss-clock.ts), and
 * says in the log when that changes.
 */
import type { Logger } from 'pino';
import { formatStep } from './clock.js';
import { clockSyncOf, type SyncProbe } from './clock-sync.js';
import { type ClockView, GnssClock } from './gnss-clock.js';

export const SYNC_CHECK_MS = 60_000;

export class ClockKeeper {
  readonly gnss = new GnssClock();
  private timer: NodeJS.Timeout | undefined;
  private asking = false;

  constructor(
    private readonly log: Logger,
    /** `clock.synchronised` as the config says now (a reload changes it). */
    private readonly setting: () => 'auto' | 'yes' | 'no',
    private readonly probe?: SyncProbe,
  ) {
    this.gnss.onChange((v) => this.tell(v));
    this.gnss.onWarning((text) => this.log.warn(text));
  }

  /** Ask once before the sources start (their first readings are judged by the answer), then every minute. */
  async start(): Promise<void> {
    await this.ask();
    this.timer = setInterval(() => void this.ask(), SYNC_CHECK_MS).unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Ask the system (or the config) again now. */
  async ask(): Promise<void> {
    if (this.asking) return;
    this.asking = true;
    try {
      this.gnss.setSync(await clockSyncOf(this.setting(), this.probe));
    } finally {
      this.asking = false;
    }
  }

  private tell(v: ClockView): void {
    const offset = v.offsetMs === null ? undefined : formatStep(v.offsetMs);
    if (v.state === 'synchronised') this.log.info({ clock: v }, `system clock synchronised (${v.from})`);
    else if (v.state === 'gnss')
      this.log.warn({ clock: v }, `system clock not synchronised (${v.from}): GNSS time is ${offset} from it; fixes keep their own time, readings stamped by the system clock are re-stamped`);
    else
      this.log.warn(
        { clock: v },
        `system clock not synchronised (${v.from}): GNSS fixes are believed for their own time; readings stamped by the system clock wait for GNSS time, taken from the first two fixes of a source that agree (clock.unsynced_hold_s)`,
      );
  }
}
