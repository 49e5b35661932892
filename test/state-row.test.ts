/**
 * The daemon's state row (what `status` reads) is written once a minute; with a source
 * running it rides in a commit of readings, so it costs no sync of its own (with
 * synchronous = FULL a sync rewrites the WAL's last pages: as much flash as a commit).
 */
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Agent } from '../src/agent.js';
import { configSchema } from '../src/config/schema.js';
import { DAEMON_STATE_KEY } from '../src/daemon-state.js';
import { createLogger } from '../src/log.js';
import { TEST_KEY, TEST_SCAC, waitFor, walCommits, daemonFixture } from './helpers.js';

// The in-process agent is this fixture's daemon: stopped after each test.
const fx = daemonFixture<Agent>();

const silent = createLogger({ level: 'silent', destination: process.stdout });

async function startAgent(source: Record<string, unknown>, stateIntervalMs = 1000): Promise<{ file: string; updatedMs: () => number }> {
  const { url } = await fx.sandbox.start();
  const file = join(fx.tmp.dir, 'b.db');
  const config = configSchema.parse({
    api: { base_url: url, scac: TEST_SCAC },
    buffer: { path: file, flush_interval_ms: 300 },
    // No push while the test looks: a change of delivery's state is written at once, by itself.
    schedule: { traces: '0 0 1 1 *', splay_s: 0 },
    sources: [source],
  });
  fx.daemon = new Agent({ file: '(test)', config, deviceId: 'dev', warnings: [] }, { key: TEST_KEY, origin: 'test' }, silent, { stateIntervalMs });
  await fx.daemon.start();
  fx.daemon.store.startLoad({ loadNumber: 'L1', resourceId: 'T1', resourceType: 'Truck', stops: [], nowMs: Date.now() });
  const a = fx.daemon;
  return { file, updatedMs: () => a.store.getState(DAEMON_STATE_KEY)?.updatedMs ?? 0 };
}

describe('the daemon state row', () => {
  it('rides in a commit of readings while readings come in', async () => {
    const { file, updatedMs } = await startAgent({ type: 'simulator', resource_id: 'T1', time_scale: 1, interval_s: 0.1 });
    fx.daemon!.store.db.pragma('wal_checkpoint(TRUNCATE)');
    const from = updatedMs();
    await waitFor(() => updatedMs() >= from + 2500, 10_000, 'three more writes of the state row');
    const commits = walCommits(file);
    const withState = commits.filter((c) => c.has('state'));
    expect(withState.length).toBeGreaterThanOrEqual(2);
    expect(withState.filter((c) => !c.has('readings')).map((c) => [...c])).toEqual([]);
  });

  it('is written within seconds when a source becomes unhealthy, not a minute later (status exits 6 on it)', async () => {
    // The row's own interval at its default, a minute: only the change of health can write it.
    const { updatedMs } = await startAgent({ type: 'exec', name: 'quiet', command: [process.execPath, '-e', 'setTimeout(() => {}, 60_000)'], no_data_timeout_s: 1 }, 60_000);
    const healthOf = () => (fx.daemon!.store.getState(DAEMON_STATE_KEY)?.value as { sources?: Array<{ name: string; healthy: boolean }> } | undefined)?.sources?.find((s) => s.name === 'quiet')?.healthy;
    await waitFor(() => healthOf() === true, 5000, 'the first row, the source healthy');
    const from = updatedMs();
    await waitFor(() => healthOf() === false, 12_000, 'the row saying the source is unhealthy');
    expect(updatedMs()).toBeGreaterThan(from);
  });

  it('is written by itself, within a commit interval of being due, when no reading comes', async () => {
    // A source that says nothing.
    const { updatedMs } = await startAgent({ type: 'exec', name: 'quiet', command: [process.execPath, '-e', 'setTimeout(() => {}, 60_000)'] });
    const from = updatedMs();
    expect(from).toBeGreaterThan(0);
    // Due after 1 s, handed to the next commit, written alone 0.3 + 2 s later: well within 6 s.
    await waitFor(() => updatedMs() > from, 6000, 'the state row written without readings');
    expect(fx.daemon!.store.counts().readings).toBe(0);
  });
});
