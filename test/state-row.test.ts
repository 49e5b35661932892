/**
 * The daemon's state row (what `status` reads) is written once a minute; with a source
 * running it rides in a commit of readings, so it costs no sync of its own (with
 * synchronous = FULL a sync rewrites the WAL's last pages: as much flash as a commit).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Agent } from '../src/agent.js';
import { configSchema } from '../src/config/schema.js';
import { DAEMON_STATE_KEY } from '../src/daemon-state.js';
import { createLogger } from '../src/log.js';
import { Sandbox } from '../src/sandbox/server.js';
import { TEST_KEY, TEST_SCAC, tempDir, waitFor } from './helpers.js';

let tmp: ReturnType<typeof tempDir>;
let sandbox: Sandbox;
let agent: Agent | undefined;
beforeEach(() => {
  tmp = tempDir();
  sandbox = new Sandbox({ key: TEST_KEY, scac: TEST_SCAC });
});
afterEach(async () => {
  await agent?.stop();
  agent = undefined;
  await sandbox.stop();
  tmp.cleanup();
});

const silent = createLogger({ level: 'silent', destination: process.stdout });

/** The WAL's commits since the last checkpoint, each as the set of tables whose pages it wrote. */
function walCommits(file: string): Array<Set<string>> {
  const wal = readFileSync(`${file}-wal`);
  const db = new Database(file, { readonly: true });
  const names = new Map((db.prepare('SELECT pageno, name FROM dbstat').all() as { pageno: number; name: string }[]).map((r) => [r.pageno, r.name]));
  db.close();
  const frame = 24 + wal.readUInt32BE(8);
  const commits: Array<Set<string>> = [];
  let current = new Set<string>();
  for (let at = 32; at + frame <= wal.length && wal.readUInt32BE(at + 8) === wal.readUInt32BE(16) && wal.readUInt32BE(at + 12) === wal.readUInt32BE(20); at += frame) {
    current.add(names.get(wal.readUInt32BE(at)) ?? 'other');
    if (wal.readUInt32BE(at + 4) !== 0) {
      commits.push(current);
      current = new Set();
    }
  }
  return commits;
}

async function startAgent(source: Record<string, unknown>): Promise<{ file: string; updatedMs: () => number }> {
  const { url } = await sandbox.start();
  const file = join(tmp.dir, 'b.db');
  const config = configSchema.parse({
    api: { base_url: url, scac: TEST_SCAC },
    buffer: { path: file, flush_interval_ms: 300 },
    // No push while the test looks: a change of delivery's state is written at once, by itself.
    schedule: { traces: '0 0 1 1 *', splay_s: 0 },
    sources: [source],
  });
  agent = new Agent({ file: '(test)', config, deviceId: 'dev', warnings: [] }, { key: TEST_KEY, origin: 'test' }, silent, { stateIntervalMs: 1000 });
  await agent.start();
  agent.store.startLoad({ loadNumber: 'L1', resourceId: 'T1', resourceType: 'Truck', stops: [], nowMs: Date.now() });
  const a = agent;
  return { file, updatedMs: () => a.store.getState(DAEMON_STATE_KEY)?.updatedMs ?? 0 };
}

describe('the daemon state row', () => {
  it('rides in a commit of readings while readings come in', async () => {
    const { file, updatedMs } = await startAgent({ type: 'simulator', resource_id: 'T1', time_scale: 1, interval_s: 0.1 });
    agent!.store.db.pragma('wal_checkpoint(TRUNCATE)');
    const from = updatedMs();
    await waitFor(() => updatedMs() >= from + 2500, 10_000, 'three more writes of the state row');
    const commits = walCommits(file);
    const withState = commits.filter((c) => c.has('state'));
    expect(withState.length).toBeGreaterThanOrEqual(2);
    expect(withState.filter((c) => !c.has('readings')).map((c) => [...c])).toEqual([]);
  });

  it('is written by itself, within a commit interval of being due, when no reading comes', async () => {
    // A source that says nothing.
    const { updatedMs } = await startAgent({ type: 'exec', name: 'quiet', command: [process.execPath, '-e', 'setTimeout(() => {}, 60_000)'] });
    const from = updatedMs();
    expect(from).toBeGreaterThan(0);
    // Due after 1 s, handed to the next commit, written alone 0.3 + 2 s later: well within 6 s.
    await waitFor(() => updatedMs() > from, 6000, 'the state row written without readings');
    expect(agent!.store.counts().readings).toBe(0);
  });
});
