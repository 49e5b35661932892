/**
 * Readings only the system clock stamps, held while that clock is not synchronised and a GNSS
 * source runs but has given no time yet (src/gnss-clock.ts): a 1-Wire temperature stamped by
 * a clock 12 h behind would land half a day early in the trace. Once a fix gives the offset
 * (or the clock is synchronised) they go on to admission and are re-stamped there; after
 * `clock.unsynced_hold_s` they go on with the system clock's time and a warning.
 *
 * Held in memory, not in the buffer: a power cut during the hold loses them, as it loses the
 * readings of a flush interval. Bounded: past MAX_HELD the oldest go on unchanged. A stop
 * lets them all go on, so what the sources handed over is committed.
 */
import type { Logger } from 'pino';
import { type ClockSources, systemClocks } from '../clock.js';
import type { GnssClock, Stamp } from '../gnss-clock.js';

/** The most readings held: a day of a 1-Wire bus read every second. */
export const MAX_HELD = 86_400;

export class ClockHold {
  private held: Array<{ go: () => void; untilMono: number }> = [];
  private timer: NodeJS.Timeout | undefined;
  private readonly unsubscribe: () => void;
  /** Readings let go without a GNSS time (the hold ran out, or it was full), this run. */
  expired = 0;
  private warned = false;

  constructor(
    private readonly gnss: GnssClock,
    readonly holdMs: number,
    private readonly log: Logger,
    private readonly clocks: ClockSources = systemClocks,
  ) {
    // A state change is told from inside admission (a fix): let them go after it returns.
    this.unsubscribe = gnss.onChange(() => {
      if (!this.gnss.shouldHold() && this.held.length > 0) setImmediate(() => this.releaseAll());
    });
  }

  /** Readings waiting now. */
  get count(): number {
    return this.held.length;
  }

  /** Whether this reading waits for a GNSS time (then hand it over with `add`). */
  wants(stamp: Stamp): boolean {
    return this.holdMs > 0 && stamp === 'system' && this.gnss.shouldHold();
  }

  /** Hold a reading; `go` admits it when it is let go. */
  add(go: () => void): void {
    this.held.push({ go, untilMono: this.clocks.mono() + this.holdMs });
    if (this.held.length > MAX_HELD) this.letGo(this.held.splice(0, this.held.length - MAX_HELD), 'the hold is full');
    this.timer ??= setInterval(() => this.tick(), 1000).unref();
  }

  /** Let go those held past `clock.unsynced_hold_s`, with the system clock's time. */
  tick(): void {
    const now = this.clocks.mono();
    let n = 0;
    while (n < this.held.length && this.held[n]!.untilMono <= now) n += 1;
    if (n > 0) this.letGo(this.held.splice(0, n), `they waited clock.unsynced_hold_s = ${this.holdMs / 1000} s`);
    if (this.held.length === 0) this.clear();
  }

  /** Let every held reading go on now (a GNSS time came, the clock was set, the agent stops). */
  releaseAll(): void {
    const all = this.held;
    this.held = [];
    this.clear();
    for (const h of all) h.go();
  }

  /** The sources stopped: everything held goes on (with the system clock's time if no GNSS time came). */
  stop(): void {
    this.unsubscribe();
    if (!this.gnss.shouldHold()) {
      this.releaseAll();
      return;
    }
    const all = this.held;
    this.held = [];
    this.clear();
    if (all.length > 0) this.letGo(all, 'the sources stopped');
  }

  private letGo(batch: Array<{ go: () => void }>, why: string): void {
    this.expired += batch.length;
    if (!this.warned) {
      this.warned = true;
      this.log.warn(
        { readings: batch.length },
        `readings stamped by the system clock kept with its time, which is not synchronised and may be wrong: no GNSS time came, and ${why} (logged once; counted in status as clock.heldExpired)`,
      );
    }
    for (const h of batch) h.go();
  }

  private clear(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }
}
