/**
 * A part of a split trace request whose answer was lost. The service refuses a request for
 * one bad point; the agent splits it, delivers the good halves, parks the bad point, and the
 * answer to one more part never arrives (the service stored it). That part may be at the
 * service: it must go again as it was, under its key, not merged with the points still to
 * send under a new key (which a service that deduplicates by key stores twice). The real
 * daemon, the real sandbox, a real buffer.
 */
import { join } from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import { Store } from '../src/buffer/store.js';
import type { SandboxEvent } from '../src/sandbox/server.js';
import { agentConfig, daemonFixture, startDaemon, waitFor } from './helpers.js';

let onRequest: ((e: SandboxEvent) => void) | undefined;
beforeEach(() => {
  seen.length = 0;
  onRequest = undefined;
});
/** Every trace request the service saw: its answer and its points. */
const seen: string[] = [];
const fx = daemonFixture({
  sandbox: {
    onRequest: (e) => {
      if (e.kind === 'trace')
        seen.push(`${e.status} ${(e.body as { traces?: Array<{ references?: Array<{ value: string }> }> } | undefined)?.traces?.map((t) => t.references?.[0]?.value.split('-').pop()).join(',')}`);
      onRequest?.(e);
    },
  },
});
const T0 = Date.now() - 3_600_000;
const bufferFile = () => join(fx.tmp.dir, 'buffer.db');

/** Six readings of one load in the buffer, the service refusing reading 1; the config that pushes every second. */
async function sixReadingsOneRefused(): Promise<string> {
  const { url } = await fx.sandbox.start();
  const store = Store.open(bufferFile());
  store.startLoad({ loadNumber: 'L1', resourceId: 'T1', resourceType: 'Truck', stops: [], nowMs: T0 });
  store.insertReadings(Array.from({ length: 6 }, (_, i) => ({ resourceId: 'T1', timeMs: T0 + 60_000 * (i + 1), lat: 41.8, lon: -87.6 + i * 1e-3 })));
  store.close();
  fx.sandbox.setFaults({ rejectTraceRefs: ['test-device-1'] });
  return agentConfig(fx.tmp.dir, url, '', { traces: '* * * * * *', sampling: 0 });
}

/** Until every reading but 1 is delivered, 1 parked and no request left fixed on disk. */
async function allButOneDelivered(): Promise<void> {
  const counts = () => {
    const s = Store.open(bufferFile());
    try {
      return { ...s.counts(), fixed: s.requests.all().length };
    } finally {
      s.close();
    }
  };
  await waitFor(
    () => {
      const c = counts();
      return c.readings === 0 && c.deadLetters === 1 && c.fixed === 0;
    },
    20_000,
    'everything but reading 1 delivered, reading 1 parked',
  ).catch((err) => {
    throw new Error(`${(err as Error).message}: ${JSON.stringify(counts())}, requests: ${JSON.stringify(seen)}`);
  });
}

/** How many keys each reading the service took came under. */
function keysPerReading(): Record<string, number> {
  const keysOf = new Map<string, Set<string>>();
  for (const t of fx.sandbox.traces) for (const p of t.body.traces) keysOf.set(p.references![0].value, (keysOf.get(p.references![0].value) ?? new Set()).add(t.idempotencyKey!));
  return Object.fromEntries([...keysOf].map(([ref, keys]) => [ref, keys.size]));
}
const ONE_KEY_EACH = { 'test-device-2': 1, 'test-device-3': 1, 'test-device-4': 1, 'test-device-5': 1, 'test-device-6': 1 };

describe('a split request, one part of it answered by no one', () => {
  it('the part that may be at the service goes again with its points and key; the rest under a key of its own', async () => {
    const cfg = await sixReadingsOneRefused();
    // Readings 1-6 in one request, refused for reading 1: halves 1-3 (refused) and 4-6
    // (taken); then 1-2 (refused), 1 (parked), 2: taken, but its answer is lost, and so is
    // the answer to the copy the client sends at once on a new connection.
    onRequest = (e) => {
      if (e.kind === 'trace' && e.status === 200 && (e.body as { traces: unknown[] }).traces.length === 3) {
        fx.sandbox.setFaults({ loseResponseNext: 2 });
        onRequest = undefined;
      }
    };
    const d = startDaemon(['--config', cfg]);
    fx.daemon = d;
    await allButOneDelivered();
    await d.stop('SIGTERM');

    const requests = fx.sandbox.traces.map((t) => ({ key: t.idempotencyKey!, refs: t.body.traces.map((p) => p.references![0].value) }));
    // Reading 2 went alone and its answers were lost; it goes again alone, under the same key.
    expect(seen).toEqual(['400 1,2,3,4,5,6', '400 1,2,3', '200 4,5,6', '400 1,2', '400 1', '0 2', '0 2', '200 2', '200 3']);
    expect(requests.map((r) => r.refs)).toEqual([['test-device-4', 'test-device-5', 'test-device-6'], ['test-device-2'], ['test-device-2'], ['test-device-2'], ['test-device-3']]);
    expect(new Set(requests.slice(1, 4).map((r) => r.key)).size).toBe(1);
    expect(keysPerReading()).toEqual(ONE_KEY_EACH);
    expect(fx.sandbox.stats.duplicateRequests).toBe(2);
  });

  it('kill -9 while a split request is being sent: after the restart the parts taken are not sent again under another key', async () => {
    const cfg = await sixReadingsOneRefused();
    // 1-6 refused for reading 1, 1-3 refused, 4-6 taken, 1-2 refused, 1 parked, 2 taken:
    // killed as that answer goes.
    const first = startDaemon(['--config', cfg]);
    fx.daemon = first;
    const killed = new Promise<void>((resolve) => {
      onRequest = (e) => {
        if (e.kind === 'trace' && e.status === 200 && (e.body as { traces: unknown[] }).traces.length === 1) {
          first.child.kill('SIGKILL');
          onRequest = undefined;
          resolve();
        }
      };
    });
    await killed;
    expect((await first.stop('SIGKILL')).signal).toBe('SIGKILL');
    expect(seen).toEqual(['400 1,2,3,4,5,6', '400 1,2,3', '200 4,5,6', '400 1,2', '400 1', '200 2']);
    const again = startDaemon(['--config', cfg]);
    fx.daemon = again;
    await allButOneDelivered();
    await again.stop('SIGTERM');
    // After the restart, 2 goes again alone under its key (the service took it, the agent never
    // knew), then 3; 4-6, taken before the kill, do not go again.
    expect(seen.slice(6)).toEqual(['200 2', '200 3']);
    expect(keysPerReading()).toEqual(ONE_KEY_EACH);
  });
});
