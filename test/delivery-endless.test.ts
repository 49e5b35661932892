/**
 * An answer whose body never ends: the service, or a proxy or captive portal in front of it,
 * answers 200 with `content-length: 100000000` and trickles a byte every 100 ms. undici's body
 * timeout only catches silence, and the client read bodies to their end: the sender, one
 * cycle at a time, waited on that body forever, and nothing else went, milestones included,
 * until a restart. The real sender and a real SQLite file against a service on port 0.
 */
import { join } from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { ApiClient } from '../src/api/client.js';
import { Store } from '../src/buffer/store.js';
import { type Config, configSchema } from '../src/config/schema.js';
import { Sender } from '../src/delivery/sender.js';
import { createLogger } from '../src/log.js';
import { recordMilestone } from '../src/milestones/record.js';
import { type DedupService, dedupService } from './dedup-service.js';
import { TEST_KEY, TEST_SCAC, tempDir, waitFor } from './helpers.js';

const silent = createLogger({ level: 'silent', destination: process.stdout });
const T0 = Date.UTC(2026, 5, 1, 12);
const TIMEOUT_MS = 1000;
let tmp: ReturnType<typeof tempDir>;
let service: DedupService;
let store: Store;
let client: ApiClient | undefined;
let sender: Sender | undefined;
let config: Config;

beforeEach(() => {
  tmp = tempDir();
});
afterEach(async () => {
  await sender?.stop();
  await client?.close();
  sender = undefined;
  client = undefined;
  store.close();
  await service.close();
  tmp.cleanup();
});

it('an answer trickled forever is given up on within api.timeout_s of its headers: a milestone recorded meanwhile goes next, the trace request again under its key', async () => {
  let trickled = false;
  service = await dedupService(
    (g) => (g.kind === 'trace' && !trickled ? ((trickled = true), 'trickle') : undefined),
    (g) => {
      // The milestone is recorded while the trace request's answer trickles.
      if (g.answer === 'trickled') recordMilestone(store, config, { loadNumber: 'L1', code: 'X3' });
    },
  );
  config = configSchema.parse({
    api: { base_url: service.url, scac: TEST_SCAC, timeout_s: TIMEOUT_MS / 1000 },
    buffer: { path: join(tmp.dir, 'b.db') },
    sampling: { interval_s: 0 },
    delivery: { poll_interval_ms: 20, retry_initial_s: 0.05, retry_max_s: 0.2, max_traces_per_request: 100, drain_interval_ms: 0 },
    sources: [{ type: 'simulator', resource_id: 'T1' }],
  });
  store = Store.open(config.buffer.path);
  store.startLoad({ loadNumber: 'L1', resourceId: 'T1', resourceType: 'Truck', stops: [], nowMs: T0 });
  store.insertReadings(Array.from({ length: 3 }, (_, i) => ({ resourceId: 'T1', timeMs: T0 + i * 1000, lat: 41.8, lon: -87.6 + i * 1e-5 })));
  client = new ApiClient({ baseUrl: config.api.base_url, milestonePath: config.api.milestone_path, tracePath: config.api.trace_path, scac: TEST_SCAC, subscriptionKey: TEST_KEY, timeoutMs: TIMEOUT_MS });
  sender = new Sender({ store, client, config, deviceId: 'dev', log: silent });
  sender.start();
  sender.requestTracePush();

  await waitFor(() => store.counts().pendingMilestones === 0 && store.counts().readings === 0, 10_000, 'the milestone and the readings delivered');
  const [first, ...rest] = service.got;
  expect(first).toMatchObject({ kind: 'trace', answer: 'trickled', points: [1, 2, 3] });
  // Abandoned (its connection closed by the client) after the timeout, not long after: the
  // upper bound is loose, a busy machine's; the old code never gave up.
  const abandonedAfter = first.closedAt! - first.at;
  expect(abandonedAfter).toBeGreaterThanOrEqual(TIMEOUT_MS - 10);
  expect(abandonedAfter).toBeLessThan(TIMEOUT_MS + 4000);
  // Then the milestone, then the same request under the same key (the service has it: 409, a duplicate).
  expect(rest.map((g) => [g.kind, g.code ?? g.points, g.answer])).toEqual([
    ['milestone', 'X3', 200],
    ['trace', [1, 2, 3], 409],
  ]);
  expect(rest[1].key).toBe(first.key);
  expect(rest[0].at).toBeGreaterThanOrEqual(first.closedAt!);
  expect(store.listMilestones('L1')[0]).toMatchObject({ code: 'X3', parkedMs: null, lastStatus: 200 });
  expect(store.counts()).toMatchObject({ readings: 0, deadLetters: 0 });
  expect(sender.status.duplicates).toBe(1);
});
