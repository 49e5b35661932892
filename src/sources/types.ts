/**
 * The one interface every source implements, built-in or a plug-in module.
 * A source turns whatever its device speaks into `Reading`s and hands them to `emit`;
 * it never touches the buffer, and a bad input is counted with `reject`, never thrown.
 * Whether a reading can be stored is decided once, by admission
 * (src/admission/ingest.ts), which also keeps each source's counts.
 */
import type { Logger } from 'pino';
import type { Reading } from '../reading.js';

export interface SourceHealth {
  healthy: boolean;
  readings: number;
  rejected: number;
  lastReadingMs?: number;
  detail?: string;
  /**
   * Done on purpose: a file read to its end, a simulator at the end of its route. Such a
   * source sends nothing more and is not reported as silent.
   */
  finished: boolean;
}

/** What admission counted for one source: shown per source in status and /metrics. */
export interface SourceCounts {
  /** Readings in good form. Their time is judged after this count: the time-rejected are among them. */
  readings: number;
  /** Bad input: what the source refused itself, and readings in bad form. */
  rejected: number;
  /** Readings refused for their time (sources_time). */
  timeRejected: number;
  /** Time of the last reading in good form. */
  lastReadingMs?: number;
}

export interface SourceContext {
  /**
   * Hand over a reading. Admission validates it, judges its time and counts it; when it is
   * refused, `where` (e.g. "line 7") opens the reason in the log.
   */
  emit(reading: Reading, where?: string): void;
  /** Count a bad input (garbled line, NaN, out of range) with a reason for the log. */
  reject(reason: string): void;
  log: Logger;
  /** What admission has counted for this source so far (for `health()`). */
  readonly counts: Readonly<SourceCounts>;
  /**
   * When what the source handed over is committed, for a source whose peer keeps a message
   * until it is acknowledged (MQTT QoS 1). Absent (tools, tests): readings are committed on
   * the buffer's own schedule and the source cannot tell when.
   */
  readonly commits?: Commits;
  /**
   * Where this reading (same resource, time, position and temperature, this source) is
   * already, for a message its peer sent again (MQTT's DUP flag): waiting for its commit (its
   * number, as `commits` counts them), in the buffer ('stored'), or not here (undefined).
   * Absent (tools, tests): not known.
   */
  readonly find?: (reading: Reading) => number | 'stored' | undefined;
}

/**
 * Readings queued by admission are numbered in order (of every source together); they leave
 * memory in that order, committed or, past buffer.max_pending, dropped.
 */
export interface Commits {
  /** The number the next reading queued will have: a reading handed over before now has a lower one. */
  readonly position: number;
  /**
   * Calls `done` once every reading numbered below `to` has left memory: with true when those
   * numbered from `from` on were all committed, false when one of them was dropped instead.
   * In order: a later call is answered after an earlier one.
   */
  whenCommitted(from: number, to: number, done: (committed: boolean) => void): void;
  /** Commits are failing now (a full disk): what waits is committed once they work again. */
  readonly failing: boolean;
  /** Commit what waits now, unless commits are failing (then on their own backoff). */
  commitNow(): void;
}

export interface Source {
  readonly name: string;
  readonly type: string;
  start(): Promise<void>;
  stop(): Promise<void>;
  health(): SourceHealth;
}
