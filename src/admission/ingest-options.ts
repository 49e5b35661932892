/**
 * What the ingest takes from the configuration: at start and again at each reload (SIGHUP),
 * which applies every one of these at once.
 */
import type { Config } from '../config/schema.js';
import type { IngestOptions } from './ingest.js';

export function ingestOptionsOf(config: Config): IngestOptions {
  return {
    batchSize: config.buffer.batch_size,
    flushIntervalMs: config.buffer.flush_interval_ms,
    keepWithoutLoad: config.privacy.record_without_load,
    maxPending: config.buffer.max_pending,
    lateReadingsMs: config.loads.late_readings_s * 1000,
    history: { intervalS: config.history.interval_s, keepDays: config.history.keep_days },
  };
}
