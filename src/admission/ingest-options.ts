/**
 * What the ingest takes from the configuration: at start and again at each reload (SIGHUP),
 * which applies every one of these at once.
 */
import type { Config } from '../config/schema.js';
import { historyOptions } from '../config/time-place.js';
import type { HistoryOptions } from '../buffer/types.js';

export interface IngestOptions {
  batchSize: number;
  flushIntervalMs: number;
  keepWithoutLoad: boolean;
  /** `loads.keep_unassigned_s` in ms: readings of no load stamped this recently are kept unassigned, for a load started `--from` (0: none). */
  keepUnassignedMs?: number;
  /** Cap on readings waiting in memory (e.g. while the disk is full); the oldest go first. */
  maxPending?: number;
  /** `loads.late_readings_s` in ms: how long after `load end` a reading of its window still joins it (0 or none: not after the close). */
  lateReadingsMs?: number;
  /** `[history]`: fixes committed go into the position history (buffer/history.ts); undefined: not. */
  history?: HistoryOptions;
}

export function ingestOptionsOf(config: Config): IngestOptions {
  return {
    batchSize: config.buffer.batch_size,
    flushIntervalMs: config.buffer.flush_interval_ms,
    keepWithoutLoad: config.privacy.record_without_load,
    maxPending: config.buffer.max_pending,
    keepUnassignedMs: config.loads.keep_unassigned_s * 1000,
    lateReadingsMs: config.loads.late_readings_s * 1000,
    history: historyOptions(config.history),
  };
}
