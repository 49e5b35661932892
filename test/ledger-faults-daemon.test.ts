/**
 * The ledger's promise held by the real daemon under random trouble: a seeded sequence of
 * service faults (lost answers, answers slower than api.timeout_s, 503s, 429s, dropped
 * connections, a captive portal), `kill -9` at random moments (a request on the wire, a few
 * ms after a 2xx), SIGTERM and restarts, SIGHUP reloads that change the chunk size, and
 * milestones recorded while a trace request is at the service. Then the service heals and
 * the daemon drains, and what the sandbox accepted is compared with what the feeder
 * handed over: every reading of a load once under one Idempotency-Key (a request sent again
 * is the same points under its key), a reading lost only among the last ones a killed
 * process held in memory, every milestone, nothing left in the buffer.
 *
 * The model test (ledger-model.test.ts) runs the same rules in-process; this one crosses
 * the process boundary: kills land wherever the daemon happens to be, and the ledger must be
 * on the disk before each request leaves. power-cut.test.ts cuts power (LazyFS) with a
 * healthy service. LEDGER_FAULTS_SEED=N replays a sequence (each run prints its seed).
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import type { SandboxEvent } from '../src/sandbox/server.js';
import { agentConfig, daemonFixture, runCli, startDaemon, waitFor, writeFile, type Daemon } from './helpers.js';

const hooks = new Set<(e: SandboxEvent) => void>();
const fx = daemonFixture({ prefix: 'ta-ledger-faults-', sandbox: { onRequest: (e) => hooks.forEach((h) => h(e)) } });
const SEED = Number(process.env.LEDGER_FAULTS_SEED ?? Date.now() % 100_000);
const STEPS = 14;
const EVERY_MS = 40;

/** xorshift32, seeded: the same seed gives the same sequence of actions. */
function prng(seed: number): { int: (a: number, b: number) => number; pick: <T>(xs: readonly T[]) => T } {
  let s = Math.imul(seed, 2654435761) >>> 0 || 1;
  const next = () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >> 17;
    s ^= s << 5;
    s >>>= 0;
    return s / 4294967296;
  };
  for (let i = 0; i < 20; i++) next();
  return { int: (a, b) => a + Math.floor(next() * (b - a + 1)), pick: (xs) => xs[Math.floor(next() * xs.length)] };
}

/** A module source: one fix every EVERY_MS, resources in turn, odometer = a serial that goes on across restarts, logged with its process before it is handed over. Stops when `stop` exists. */
function feeder(dir: string): string {
  return writeFile(
    dir,
    'feeder.mjs',
    `import { appendFileSync, existsSync, readFileSync } from 'node:fs';
export function createSource(ctx, o) {
  let serial = existsSync(o.log) ? Number(readFileSync(o.log, 'utf8').trim().split('\\n').pop().split(' ')[1] ?? 0) || 0 : 0;
  let timer;
  return {
    start() {
      timer = setInterval(() => {
        if (existsSync(o.stop)) return;
        serial += 1;
        const resourceId = serial % 2 ? 'T1' : 'T2';
        appendFileSync(o.log, process.pid + ' ' + serial + ' ' + resourceId + '\\n');
        ctx.emit({ resourceId, timeMs: o.base + serial * ${EVERY_MS}, lat: 41.8 + (serial % 500) * 1e-4, lon: -87.6, odometer: serial });
      }, ${EVERY_MS});
    },
    stop() { clearInterval(timer); },
  };
}
`,
  );
}

describe('the ledger under random faults, kills and reloads of the real daemon', () => {
  it(`every reading once under one key, every milestone, nothing left (seed ${SEED})`, { timeout: 90_000 }, async () => {
    console.log(`ledger-faults-daemon: LEDGER_FAULTS_SEED=${SEED}`);
    const r = prng(SEED);
    const { url } = await fx.sandbox.start();
    const dir = fx.tmp.dir;
    const log = join(dir, 'emitted.log');
    const stopFile = join(dir, 'stop-feeding');
    const source = `[[sources]]\ntype = "module"\nname = "feeder"\npath = "${feeder(dir)}"\noptions = { log = "${log}", stop = "${stopFile}", base = 0 }\n`;
    const cfg = agentConfig(dir, url, `max_traces_per_request = 20\ndrain_interval_ms = 0\nauth_retry_s = 1\n${source}`, { traces: '* * * * * *', sampling: 0 });
    // Answers slower than this are timeouts: the service has the request, the agent no answer.
    writeFileSync(cfg, readFileSync(cfg, 'utf8').replace('timeout_s = 5', 'timeout_s = 1'));
    for (const [load, res] of [
      ['L1', 'T1'],
      ['L2', 'T2'],
    ]) {
      const started = await runCli(['load', 'start', load, '--resource', res, '--config', cfg]);
      expect(started.code, started.stderr).toBe(0);
    }
    // The feeder's times begin once both windows are open (a load's window opens when `load
    // start` runs): a reading stamped before it is kept without a load, never sent, and the
    // buffer never drains. Stamped a second ahead of the config's writing, the first readings
    // of T2 fell before L2's window whenever the two `load start` took longer than that.
    writeFileSync(cfg, readFileSync(cfg, 'utf8').replace('base = 0 }', `base = ${Date.now()} }`));

    const ended = new Map<number, string>();
    let daemon: Daemon | undefined;
    const start = () => {
      daemon = startDaemon(['--config', cfg]);
      fx.daemon = daemon;
    };
    const stop = async (signal: NodeJS.Signals) => {
      const d = daemon!;
      const res = await d.stop(signal);
      ended.set(d.child.pid!, res.signal ?? `exit ${res.code}`);
      if (res.signal === null && res.code !== 0) throw new Error(`the daemon exited ${res.code}:\n${d.output()}`);
    };
    /** Resolves once `when` matched a request (then runs `then` after `delayMs`), or after 5 s. */
    const onRequest = (when: (e: SandboxEvent) => boolean, delayMs: number, then: () => void) =>
      new Promise<boolean>((resolve) => {
        const hook = (e: SandboxEvent) => {
          if (!when(e)) return;
          hooks.delete(hook);
          clearTimeout(timer);
          setTimeout(() => {
            then();
            resolve(true);
          }, delayMs);
        };
        const timer = setTimeout(() => {
          hooks.delete(hook);
          resolve(false);
        }, 5000);
        hooks.add(hook);
      });
    /** Runs `then` once the service has read a trace request whose answer it holds (the gate), or gives up after 5 s. */
    const onTraceAtService = (then: () => void) =>
      new Promise<boolean>((resolve) => {
        const timer = setTimeout(() => {
          fx.sandbox.gate = undefined;
          resolve(false);
        }, 5000);
        fx.sandbox.gate = (req) => {
          if (!req.url?.includes('trace')) return undefined;
          fx.sandbox.gate = undefined;
          clearTimeout(timer);
          then();
          resolve(true);
          // Held a moment, so what `then` does happens while the request is at the service.
          return new Promise((res) => setTimeout(res, 200));
        };
      });
    const milestones: Array<Promise<unknown>> = [];
    const steps: string[] = [];

    start();
    await daemon!.started();
    for (let i = 0; i < STEPS; i++) {
      const action = r.pick(['lost', 'slow', '503', '429', 'drop', 'portal', 'refuse', 'kill', 'kill-after-2xx', 'kill-on-wire', 'term', 'reload', 'milestone-mid-push'] as const);
      const step = `${action}`;
      switch (action) {
        case 'lost':
          fx.sandbox.setFaults({ loseResponseNext: r.int(1, 3) });
          break;
        case 'refuse': {
          // A point soon to be sent (ids run close to the feeder's serial) is refused, and the
          // answers to what is taken after it are lost: a split request with parts in doubt.
          const soon = readFileSync(log, 'utf8').trim().split('\n').length + r.int(5, 40);
          fx.sandbox.setFaults({ rejectTraceRefs: [`test-device-${soon}`], loseResponseNext: r.int(0, 2) });
          steps.push(`refuse reading ${soon}`);
          break;
        }
        case 'slow':
          // Answered after the client gave up: the service has the request, the agent no answer.
          fx.sandbox.setFaults({ latencyMs: 1300 });
          break;
        case '503':
          fx.sandbox.setFaults({ failNext: r.int(1, 4) });
          break;
        case '429':
          fx.sandbox.setFaults({ throttleNext: r.int(1, 2), retryAfter: '1' });
          break;
        case 'drop':
          fx.sandbox.setFaults({ dropNext: r.int(1, 2) });
          break;
        case 'portal':
          fx.sandbox.setFaults({ portalNext: r.int(1, 2) });
          break;
        case 'kill':
          await new Promise((res) => setTimeout(res, r.int(0, 800)));
          await stop('SIGKILL');
          start();
          break;
        case 'kill-after-2xx':
        case 'kill-on-wire': {
          const delayMs = r.int(0, 25);
          const d = daemon!;
          const kill = () => d.child.kill('SIGKILL');
          // On the wire: the service read the request and holds its answer when the kill lands.
          const hit = action === 'kill-on-wire' ? await onTraceAtService(kill) : await onRequest((e) => e.kind === 'trace' && e.status === 200, delayMs, kill);
          steps.push(`${step}${hit ? ` +${delayMs} ms` : ' (no request came)'}`);
          await stop('SIGKILL');
          start();
          continue;
        }
        case 'term':
          await stop('SIGTERM');
          start();
          break;
        case 'reload': {
          const max = r.pick([3, 7, 50]);
          writeFileSync(cfg, readFileSync(cfg, 'utf8').replace(/max_traces_per_request = \d+/, `max_traces_per_request = ${max}`));
          // SIGHUP before the daemon is up would end it (its default action), not reload it.
          await daemon!.started();
          daemon!.child.kill('SIGHUP');
          steps.push(`${step} max_traces_per_request=${max}`);
          break;
        }
        case 'milestone-mid-push':
          await onTraceAtService(() => milestones.push(runCli(['milestone', '--load', r.pick(['L1', 'L2']), '--code', 'X3', '--force', '--lat', '41.8', '--lon', '-87.6', '--config', cfg])));
          break;
      }
      if (action !== 'reload' && action !== 'refuse') steps.push(step);
      await new Promise((res) => setTimeout(res, r.int(300, 1500)));
      if (action === 'slow') fx.sandbox.setFaults({ latencyMs: 0 });
    }
    console.log(`ledger-faults-daemon: seed ${SEED}: ${steps.join(', ')}`);
    for (const m of await Promise.all(milestones)) expect((m as { code: number }).code).toBe(0);

    // The service heals, the feeder stops, the daemon drains; what the service refused goes
    // again once it takes it.
    const db = () => new Database(join(dir, 'buffer.db'), { readonly: true, fileMustExist: true });
    const left = () => {
      const d = db();
      try {
        return d
          .prepare(
            'SELECT (SELECT count(*) FROM readings) AS readings, (SELECT count(*) FROM readings WHERE state = 0) AS due, (SELECT count(*) FROM readings WHERE state = 1) AS held, (SELECT count(*) FROM readings WHERE state = 3) AS unassigned, (SELECT count(*) FROM milestones WHERE sent_ms IS NULL) AS milestones, (SELECT count(*) FROM requests) AS requests, (SELECT count(*) FROM dead_letters) AS deadLetters',
          )
          .get() as { readings: number; due: number; held: number; unassigned: number; milestones: number; requests: number; deadLetters: number };
      } finally {
        d.close();
      }
    };
    /** What is left, row by row, for a failure to say why: each reading left (its state, its marks, and its time against the windows of its resource's loads), the loads' cursors and windows, the fixed requests. */
    const leftRows = () => {
      const d = db();
      try {
        const loads = d.prepare('SELECT load_number, resource_id, acked_id, end_id, window_from_ms, window_until_ms FROM loads').all();
        const readings = d
          .prepare(
            `SELECT r.id, r.resource_id, r.state, r.time_ms, (SELECT group_concat(m.load_number || ':' || m.state) FROM load_marks m WHERE m.reading_id = r.id) AS marks,
                (SELECT group_concat(l.load_number || ':' || (r.time_ms - l.window_from_ms)) FROM loads l WHERE l.resource_id = r.resource_id) AS ms_after_window_from
               FROM readings r ORDER BY r.id LIMIT 40`,
          )
          .all();
        const marks = d.prepare('SELECT * FROM load_marks ORDER BY reading_id LIMIT 40').all();
        const requests = d.prepare('SELECT load_number, kind, after_id, last_id, point_ids, idem_key FROM requests').all();
        const lines = (name: string, rows: unknown[]) => [`${name}:`, ...rows.map((row) => `  ${JSON.stringify(row)}`)];
        return [...lines('loads', loads), ...lines('readings left (the first 40)', readings), ...lines('load_marks', marks), ...lines('requests', requests)].join('\n');
      } finally {
        d.close();
      }
    };
    fx.sandbox.setFaults({ loseResponseNext: 0, latencyMs: 0, failNext: 0, throttleNext: 0, dropNext: 0, portalNext: 0, rejectTraceRefs: [] });
    writeFileSync(stopFile, '');
    const retried = await waitFor(
      async () => {
        const l = left();
        if (l.due > 0 || l.requests > 0 || l.milestones > 0) return undefined;
        const res = await runCli(['dead-letter', 'retry', '--all', '--config', cfg]);
        expect(res.code, res.stderr).toBe(0);
        return res.stdout.trim();
      },
      30_000,
      `everything delivered or parked after: ${steps.join(', ')}`,
    ).catch((err) => {
      throw new Error(`${(err as Error).message}: ${JSON.stringify(left())}\n${leftRows()}\n${daemon!.output().split('\n').slice(-30).join('\n')}`);
    });
    await waitFor(
      () => {
        const l = left();
        return l.readings === 0 && l.milestones === 0 && l.requests === 0 ? l : undefined;
      },
      30_000,
      `the buffer to drain after: ${steps.join(', ')}`,
    ).catch((err) => {
      throw new Error(`${(err as Error).message}: ${JSON.stringify(left())}\n${leftRows()}\n${daemon!.output().split('\n').slice(-20).join('\n')}`);
    });
    await stop('SIGTERM');
    console.log(`ledger-faults-daemon: seed ${SEED}: then ${retried}`);
    expect(left()).toEqual({ readings: 0, due: 0, held: 0, unassigned: 0, milestones: 0, requests: 0, deadLetters: 0 });

    // Each key one body; each reading of a load under one key.
    const bodyOfKey = new Map<string, string>();
    const keysOf = new Map<string, Set<string>>();
    for (const t of fx.sandbox.traces) {
      const key = t.idempotencyKey!;
      const refs = t.body.traces.map((p) => p.references![0].value);
      expect(bodyOfKey.get(key) ?? refs.join(), `key ${key} sent with other points`).toBe(refs.join());
      bodyOfKey.set(key, refs.join());
      for (const p of t.body.traces) {
        const at = `${t.body.loadNumber} #${p.odometer}`;
        keysOf.set(at, (keysOf.get(at) ?? new Set()).add(key));
      }
    }
    const underTwoKeys = [...keysOf].filter(([, keys]) => keys.size > 1).map(([at]) => at);
    expect(underTwoKeys, 'readings delivered under more than one Idempotency-Key').toEqual([]);

    // Every reading handed over reached its load, except the last ones a killed process held uncommitted.
    const emitted = readFileSync(log, 'utf8')
      .trim()
      .split('\n')
      .map((l) => l.split(' '))
      .map(([pid, serial, res]) => ({ pid: Number(pid), serial: Number(serial), load: res === 'T1' ? 'L1' : 'L2' }));
    const delivered = (e: (typeof emitted)[number]) => keysOf.has(`${e.load} #${e.serial}`);
    for (const pid of new Set(emitted.map((e) => e.pid))) {
      const mine = emitted.filter((e) => e.pid === pid);
      const firstMissing = mine.findIndex((e) => !delivered(e));
      if (firstMissing < 0) continue;
      const lost = mine.slice(firstMissing);
      expect(
        lost.filter(delivered).map((e) => e.serial),
        `process ${pid} (${ended.get(pid)}): reading ${mine[firstMissing].serial} lost, though later ones were delivered`,
      ).toEqual([]);
      expect(ended.get(pid), `process ${pid} lost its last ${lost.length} readings`).toBe('SIGKILL');
      // At most what a flush interval (100 ms) and a commit in progress hold.
      expect(lost.length, `process ${pid} lost its last ${lost.length} readings`).toBeLessThanOrEqual(30);
    }
    expect(existsSync(stopFile)).toBe(true);

    // Every milestone recorded reached the service under its own key, and nothing else did.
    const d = db();
    const refs = (d.prepare('SELECT ref FROM milestones').pluck().all() as string[]).sort();
    d.close();
    expect([...new Set(fx.sandbox.milestones.map((m) => m.idempotencyKey))].sort()).toEqual(refs);
    expect(refs.length).toBe(milestones.length);
  });
});
