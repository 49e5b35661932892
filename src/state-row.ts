/**
 * When the daemon writes its state row (src/daemon-state.ts), which `status` reads: at once
 * when delivery's state changed (a push shows at once) or a source became healthy or
 * unhealthy (`status` exits 6 for an unhealthy source: a monitoring script must not wait a
 * minute to see it; at most one such write every HEALTH_WRITE_MS), else every `intervalMs`,
 * riding in the next commit of readings so that it costs no sync of its own (every write
 * wears the flash).
 */
import type { Logger } from 'pino';
import type { Ingest } from './admission/ingest.js';
import type { Store } from './buffer/store.js';
import { DAEMON_STATE_KEY, type DaemonState } from './daemon-state.js';
import type { Sender } from './delivery/sender.js';

export interface StateRowParts {
  store: Store;
  ingest: Ingest;
  sender: Sender;
  log: Logger;
  /** The row as it is now (the agent composes it). */
  state: (running: boolean) => DaemonState;
  /** How often the row is written when nothing changed, ms. */
  intervalMs: number;
  /** Which sources are healthy now, as a key that changes when one of them changes. */
  health?: () => string;
}

/** At most one write a this often for a change of the sources' health (a flapping source). */
export const HEALTH_WRITE_MS = 5000;

export class StateRow {
  private lastSenderState = '';
  private lastHealth = '';
  /** Monotonic ms of the last write. */
  private lastWriteMs = Number.NEGATIVE_INFINITY;
  /** When (monotonic ms) the row was handed to the next commit of readings (undefined: it was not). */
  private queuedMs: number | undefined;
  private failing = false;
  /** The last row was written (running: false): a late change (a clock answer after the stop) writes nothing. */
  private stopped = false;

  constructor(private readonly parts: StateRowParts) {}

  /** The first write, at start. */
  start(): void {
    this.lastSenderState = this.deliveryState();
    this.lastHealth = this.parts.health?.() ?? '';
    this.write(true);
  }

  /** Called every second: written when delivery changed, else when due (`now`: monotonic ms). */
  tick(now = performance.now()): void {
    const { ingest, intervalMs } = this.parts;
    const sender = this.deliveryState();
    const health = this.parts.health?.() ?? '';
    if (sender !== this.lastSenderState) {
      this.lastSenderState = sender;
      this.lastHealth = health;
      this.write(true);
    } else if (health !== this.lastHealth && now - this.lastWriteMs >= HEALTH_WRITE_MS) {
      this.lastHealth = health;
      this.write(true);
    } else if (now - this.lastWriteMs >= intervalMs) {
      // Due: in the next commit of readings (one sync instead of two), or by itself when
      // none came within a commit interval, capped at the state interval (a quiet source,
      // commits failing; `status` calls a row three intervals old hung).
      if (this.queuedMs === undefined) {
        this.queuedMs = now;
        // It throws rather than logs: an error that ends the whole transaction fails the commit.
        ingest.writeWithNextCommit('state', () => this.writeRow(true));
      } else if (now - this.queuedMs > Math.min(ingest.options.flushIntervalMs, intervalMs) + 2000) {
        this.write(true);
      }
    }
  }

  /** What of delivery and ingest the state row shows: written at once when it changes. */
  private deliveryState(): string {
    return JSON.stringify(this.parts.sender.status) + JSON.stringify(this.parts.ingest.stats.trouble);
  }

  /** The state row, and the newest fixes with it (last_fix a minute behind at most): one transaction; throws. */
  private writeRow(running: boolean): void {
    const { store } = this.parts;
    this.lastWriteMs = performance.now();
    this.queuedMs = undefined;
    // By itself on a full disk, it may give up the reserve (withReserve): the daemon's state is
    // a write delivery needs. Riding in a commit of readings, it cannot (and fails the commit).
    store.withReserve(() =>
      store.db.transaction(() => {
        store.flushFixes();
        store.setState(DAEMON_STATE_KEY, this.parts.state(running), Date.now());
      })(),
    );
  }

  /** Write the row now, by itself (not riding in a commit); a failure is logged once, not thrown. */
  write(running: boolean): void {
    if (this.stopped) return;
    this.stopped = !running;
    this.parts.ingest.writeWithNextCommit('state', undefined);
    try {
      this.writeRow(running);
      if (this.failing) this.parts.log.info('daemon state written again');
      this.failing = false;
    } catch (err) {
      // Once per failure, not every second while the disk is full.
      if (!this.failing) this.parts.log.warn({ err: (err as Error).message }, 'could not write daemon state (status shows the last one written)');
      this.failing = true;
    }
  }
}
