/**
 * What rides on a chunk's acknowledgement besides the cursor (`traces.temperature_without_fix`):
 * the load's fix at its new cursor, where the temperature-only readings after it are placed,
 * and the temperature-only readings the cursor passes without sending them (no fix recent
 * enough, or "drop"), counted as dropped. All in the transaction that moves the cursor: a
 * crash never leaves a count without its acknowledgement, or the other way round.
 */
import type { Readings } from './readings.js';
import type { StateTable } from './state.js';
import type { BufferContext } from './store.js';
import type { FixedRequest } from './requests.js';
import type { Fix } from './types.js';

/** Counter of temperature-only readings acknowledged unsent (`status`: "no fix"). */
export const COUNTER_DROPPED_NO_FIX = 'readings_dropped_no_fix';

/** What a chunk's acknowledgement carries besides the cursor. */
export interface ChunkPassed {
  /** The resource's newest fix at or below the new cursor (null: none yet). */
  fix: Fix | null;
  /** Temperature-only readings the cursor passes unsent. */
  dropped: number;
}

export class ChunkAck {
  constructor(
    private readonly ctx: BufferContext,
    private readonly readings: Readings,
    private readonly state: StateTable,
  ) {}

  /** Readings.ackReadings, with what the chunk passed (see above) and the request fixed next (requests.ts) in the same transaction. */
  ackReadings(loadNumber: string, upToId: number, lastSampleMs: number | null, correlationId?: string, passed?: ChunkPassed, fixNext?: FixedRequest): void {
    const fix = passed?.fix ?? null;
    // The common case, one statement: the fix is a column of the cursor's row.
    if (!passed?.dropped) {
      this.readings.ackReadings(loadNumber, upToId, lastSampleMs, correlationId, fix, fixNext);
      return;
    }
    const { dropped } = passed;
    this.ctx.withReserve(() =>
      this.ctx.db
        .transaction(() => {
          this.state.bump(COUNTER_DROPPED_NO_FIX, dropped);
          this.readings.ackReadings(loadNumber, upToId, lastSampleMs, correlationId, fix, fixNext);
        })
        .immediate(),
    );
  }
}
