/**
 * A load's newest position as a request of its own, sent ahead of its backlog after an
 * outage (the drain's sendNewestFirst), so the service learns where the truck is now; or the
 * one fixed before that has no answer yet, sent again exactly, under its key.
 */
import type { FixedRequest, LoadRow, Store } from '../buffer/store.js';
import type { Prepared } from './post-traces.js';
import { buildTraceChunk, type TraceBuildOptions } from './traces.js';

/** A load's newest position as a request of its own (always with a body), and how far its backlog reaches back. */
export interface Newest {
  p: Prepared & { body: Buffer };
  backlogS: number;
}

/** What building it takes from the drain. */
export interface NewestDeps {
  store: Store;
  opts: TraceBuildOptions;
  stopResolver: (load: LoadRow) => (timeMs: number) => number | undefined;
  /** Whether a request fixed before may have gone out under this key (Drain.maySentBefore). */
  maySentBefore: (fixed: FixedRequest, key: string) => boolean;
}

/**
 * A load's newest position as a request of its own, when its backlog is more than one
 * chunk; or the one fixed before that has no answer yet, whatever the backlog is now.
 */
export function newestOf(loadNumber: string, { store, opts, stopResolver, maySentBefore }: NewestDeps): Newest | undefined {
  const load = store.getLoad(loadNumber);
  if (!load) return undefined;
  const { newest, oldestMs } = store.backlogOf(loadNumber);
  const fixed = store.requests.fixed(loadNumber, 'newest');
  if (fixed) {
    // Its point, or the points of a split request's part that failed in doubt (in-doubt.ts).
    const ids = fixed.pointIds.length > 0 ? fixed.pointIds : [0];
    const pages = store.tracePages(loadNumber, Math.min(...ids) - 1, Math.max(...ids));
    const chunk = buildTraceChunk({ ...load, lastSampleMs: null }, { pages }, stopResolver(load), { ...opts, samplingMs: 0, maxPoints: ids.length + 1, pointIds: new Set(ids) }, true);
    if (!chunk?.body) {
      // Its points went meanwhile (in a chunk, or dropped by a limit): nothing to repeat.
      store.markSent(loadNumber, [], { settle: 'newest' });
      return undefined;
    }
    // The key it went with while it carries the same points; else the one its points make.
    const key = fixed.key !== null && chunk.points === fixed.pointIds.length ? fixed.key : chunk.idempotencyKey;
    const p: Newest['p'] = {
      load,
      body: Buffer.from(JSON.stringify(chunk.body)),
      key,
      points: chunk.points,
      readingIds: chunk.readingIds,
      lastId: chunk.lastId,
      lastSampleMs: chunk.lastSampleMs,
      dropped: 0,
      cursorFix: null,
      rebuild: () => chunk,
      fix: fixed,
      fixed: true,
      sentBefore: maySentBefore(fixed, key),
    };
    return { p, backlogS: oldestMs === null || !newest ? 0 : Math.round((newest.time_ms - oldestMs) / 1000) };
  }
  if (!newest || oldestMs === null) return undefined;
  // A chunk of the load is fixed and may be at the service: its points go again as they
  // were, and the newest position, if it is among them, must not go first on its own.
  if (store.requests.fixed(loadNumber, 'chunk')) return undefined;
  const spanMs = newest.time_ms - oldestMs;
  const backlog = opts.samplingMs > 0 ? spanMs > opts.samplingMs * opts.maxPoints : spanMs > opts.maxPoints * 1000;
  if (!backlog) return undefined;
  const chunk = buildTraceChunk({ ...load, lastSampleMs: null }, [newest], stopResolver(load), { ...opts, samplingMs: 0 }, true);
  if (!chunk?.body) return undefined;
  const p: Newest['p'] = {
    load,
    body: Buffer.from(JSON.stringify(chunk.body)),
    key: chunk.idempotencyKey,
    points: chunk.points,
    readingIds: chunk.readingIds,
    lastId: chunk.lastId,
    lastSampleMs: chunk.lastSampleMs,
    dropped: 0,
    cursorFix: null,
    rebuild: () => chunk,
    fix: { loadNumber, kind: 'newest', afterId: newest.id - 1, lastId: newest.id, lastSampleMs: null, pointIds: [newest.id], key: chunk.idempotencyKey, dropped: 0 },
    fixed: false,
    sentBefore: false,
  };
  return { p, backlogS: Math.round(spanMs / 1000) };
}
