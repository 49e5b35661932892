/**
 * The fleet command ids seen (fleet_commands), on a real buffer file: each is forgotten
 * COMMAND_RETENTION_MS after it was last received, one received again is kept from then, and
 * a clock set years ahead does not empty the table. When the link prunes (only on a settled
 * connection) is tested against a real broker in fleet.test.ts.
 */
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { Store } from '../src/buffer/store.js';
import { type Config, configSchema } from '../src/config/schema.js';
import { COMMAND_RETENTION_MS, Commands } from '../src/fleet/commands.js';
import { TEST_SCAC, tempFixture } from './helpers.js';

const DAY = 86_400_000;
const T0 = Date.parse('2026-11-01T12:00:00Z');

describe('fleet command ids (a real buffer file)', () => {
  const tmp = tempFixture('ta-fleet-prune-');
  const config = (): Config => configSchema.parse({ api: { base_url: 'http://127.0.0.1:9', scac: TEST_SCAC }, buffer: { path: tmp.buffer }, sources: [{ type: 'simulator', resource_id: 'T1' }] });

  /** Each command at its time, through a Store opened and closed as the daemon's would be. */
  function run(steps: Array<[name: string, body: object, atMs: number]>, then?: (c: Commands) => void): Array<ReturnType<Commands['handle']>> {
    const store = Store.open(tmp.buffer);
    try {
      const cfg = config();
      const commands = new Commands(
        store,
        () => cfg,
        () => 65_536,
      );
      const out = steps.map(([name, body, at]) => commands.handle(name, Buffer.from(JSON.stringify(body)), at));
      then?.(commands);
      return out;
    } finally {
      store.close();
    }
  }

  const ids = () => {
    const db = new Database(tmp.buffer, { readonly: true });
    try {
      return (db.prepare('SELECT command_id FROM fleet_commands ORDER BY command_id').pluck().all() as string[]).join(',');
    } finally {
      db.close();
    }
  };

  it('forgets an id COMMAND_RETENTION_MS after it was last received; one received again is kept from then', () => {
    expect(COMMAND_RETENTION_MS).toBe(30 * DAY);
    const [, load] = run([
      ['status', { commandId: 'a' }, T0],
      ['load-start', { commandId: 'b', loadNumber: 'L-1', resourceId: 'T1' }, T0 + DAY],
      ['status', { commandId: 'c' }, T0 + 40 * DAY],
    ]);
    expect(load.reply).toMatchObject({ ok: true });
    // `a` again (a retained command at a reconnect): the first answer, and kept from now.
    const [again] = run([['status', { commandId: 'a' }, T0 + 35 * DAY]]);
    expect(again).toMatchObject({ repeated: true, reply: { commandId: 'a', ok: true } });
    run([], (c) => expect(c.prune(T0 + DAY + COMMAND_RETENTION_MS)).toBe(0));
    expect(ids()).toBe('a,b,c');
    run([], (c) => expect(c.prune(T0 + 41 * DAY)).toBe(1));
    expect(ids()).toBe('a,c');
    // Past the window `b` is new again: the loads table still keeps a second load out.
    const [late] = run([['load-start', { commandId: 'b', loadNumber: 'L-1', resourceId: 'T1' }, T0 + 42 * DAY]]);
    expect(late).toMatchObject({ repeated: false, reply: { ok: false, status: 65, message: 'load L-1 is already active on T1' } });
  });

  it('a clock set years ahead does not empty it: the age is counted from the newest id', () => {
    run([
      ['status', { commandId: 'a' }, T0],
      ['status', { commandId: 'b' }, T0 + 10 * DAY],
    ]);
    run([], (c) => expect(c.prune(T0 + 3650 * DAY)).toBe(0));
    expect(ids()).toBe('a,b');
    run([['status', { commandId: 'c' }, T0 + 35 * DAY]], (c) => expect(c.prune(T0 + 3650 * DAY)).toBe(1));
    expect(ids()).toBe('b,c');
  });

  it('an empty table: nothing to do', () => {
    run([], (c) => expect(c.prune(T0)).toBe(0));
  });
});
