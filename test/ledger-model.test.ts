/**
 * The buffer's ledger against a model (issue 29, item 11). Random sequences of what a truck's
 * days bring: readings of two resources, with and without a fix, inside and outside load
 * windows; commits; `load start`, `load end` and milestones on a connection of their own, as
 * the CLI makes them; pushes the service answers well or badly; crashes that lose what waited
 * in memory; clean stops, restarts and purges. Each runs in-process against a real SQLite file
 * and the real sandbox on port 0; after a last push to a healthy service, what the service and
 * the dead-letter table hold is checked against a model a few lines long (PROPERTIES).
 *
 * CI runs MODEL_RUNS sequences (default below). To run more, or a failing case again:
 * `npm run test:model -- --runs 500 [--seed S [--path P]] [--props all]` (scripts/test-model.mjs).
 * A failure prints the shrunk sequence as the calls below (paste it into a replay) with the
 * seed and path that bring it back; `--props all` also enforces what today's code breaks.
 */
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApiClient } from '../src/api/client.js';
import { Ingest } from '../src/admission/ingest.js';
import { LoadError, Store } from '../src/buffer/store.js';
import { configSchema, type Config } from '../src/config/schema.js';
import { Sender } from '../src/delivery/sender.js';
import { createLogger } from '../src/log.js';
import { recordMilestone } from '../src/milestones/record.js';
import { NO_FAULTS, Sandbox, type SandboxEvent } from '../src/sandbox/server.js';
import { TEST_KEY, TEST_SCAC, tempDir, waitFor } from './helpers.js';

// ---- what must be true --------------------------------------------------------------------

const PROPERTIES = {
  delivered: "every committed reading with a fix in a load's window reaches the service for that load, or is a dead letter of it the service refused",
  'in-window': 'nothing reaches the service or the dead letters for a load that is not in its window',
  'one-key': 'each point of a load goes in one request (one Idempotency-Key); a request sent again is the same body',
  milestones: 'every confirmed milestone reaches the service under its one key, and nothing else does',
  'nothing-due': 'after a push to a healthy service nothing is left to send',
  'temperature-settles': 'a reading without a fix is not left due for ever (it goes with the last fix, or is dropped and counted)',
} as const;
type Prop = keyof typeof PROPERTIES;

/**
 * Properties not enforced in the CI run, each with why. Empty: every defect the model found
 * (issue 29: a retry after a lost answer that grew under a new key, temperatures of a load
 * without a fix left due, readings older than the last point never sent) is fixed, and its
 * shortest sequence is replayed below.
 */
const FAILS_TODAY: Partial<Record<Prop, string>> = {};

/**
 * Readings of a resource arrive out of time order (a gateway's backlog, a second source, a
 * broker's redelivery): today a reading older than its load's last point is never sent and
 * stays due while the load is active, though `sampling.interval_s = 0` "keeps every
 * reading" (no item of issue 29 covers it yet; see the replay below). Off in the CI run:
 * readings then come in time order, as src/buffer/readings.ts assumes.
 */
const OUT_OF_ORDER = process.env.MODEL_OUT_OF_ORDER === '1';
const RUNS = Number(process.env.MODEL_RUNS ?? 50);
const SEED = process.env.MODEL_SEED === undefined ? undefined : Number(process.env.MODEL_SEED);
const PATH = process.env.MODEL_PATH || undefined;
const ENFORCED = new Set<Prop>(
  process.env.MODEL_PROPS === 'all'
    ? (Object.keys(PROPERTIES) as Prop[])
    : process.env.MODEL_PROPS
      ? (process.env.MODEL_PROPS.split(',') as Prop[])
      : (Object.keys(PROPERTIES) as Prop[]).filter((p) => !(p in FAILS_TODAY)),
);

// ---- commands -----------------------------------------------------------------------------

type Resource = 'R1' | 'R2';
type LoadName = 'L1' | 'L2' | 'L3' | 'L4';
/**
 * How the service answers during a push: `lost` stores the request and drops the connection
 * before the answer (`lost-twice`: the client's immediate resend on a new connection too),
 * `timeout` stores it after the client gave up, `drop` drops it unread, `5xx` answers 503,
 * `conflict` answers 409 to a request whose key it already stored, `refuse:n` answers 400 to
 * every request holding the n-th reading still due (counting round), from then on.
 */
type Fault = 'lost' | 'lost-twice' | 'timeout' | 'drop' | '5xx' | 'conflict' | `refuse:${number}`;
interface ReadingSpec {
  resource: Resource;
  fix: boolean;
  /** How long before now it was taken, s (0: now; 2: before a load started or ended 1 s ago). */
  agoS: number;
}
type Cmd =
  | { k: 'ingest'; readings: ReadingSpec[] }
  | { k: 'commit' | 'crash' | 'stop' | 'reopen' | 'purge' }
  | { k: 'start'; load: LoadName; resource: Resource; fromAgoS?: number }
  | { k: 'end' | 'milestone'; load: LoadName }
  | { k: 'push'; faults: Fault[] };

/** A command that prints as the call that makes it, so a shrunk sequence pastes into a replay. */
function cmd<T extends Cmd>(c: T): T {
  return Object.assign(c, { [fc.toStringMethod]: () => show(c) });
}
function show(c: Cmd): string {
  const q = (s: string) => `'${s}'`;
  switch (c.k) {
    case 'ingest':
      return `ingest(${c.readings.map((r) => `${r.fix ? 'fix' : 'temp'}(${q(r.resource)}${r.agoS ? `, ${r.agoS}` : ''})`).join(', ')})`;
    case 'start':
      return `start(${q(c.load)}, ${q(c.resource)}${c.fromAgoS ? `, ${c.fromAgoS}` : ''})`;
    case 'end':
    case 'milestone':
      return `${c.k}(${q(c.load)})`;
    case 'push':
      return `push(${c.faults.map(q).join(', ')})`;
    default:
      return `${c.k}()`;
  }
}
const fix = (resource: Resource, agoS = 0): ReadingSpec => ({ resource, fix: true, agoS });
const temp = (resource: Resource, agoS = 0): ReadingSpec => ({ resource, fix: false, agoS });
const ingest = (...readings: ReadingSpec[]) => cmd({ k: 'ingest', readings });
const commit = () => cmd({ k: 'commit' });
/** `fromAgoS`: started `--from` that many seconds ago (loads.keep_unassigned_s), taking the readings kept without a load since. */
const start = (load: LoadName, resource: Resource, fromAgoS?: number) => cmd(fromAgoS ? { k: 'start', load, resource, fromAgoS } : { k: 'start', load, resource });
const end = (load: LoadName) => cmd({ k: 'end', load });
const milestone = (load: LoadName) => cmd({ k: 'milestone', load });
const push = (...faults: Fault[]) => cmd({ k: 'push', faults });
const crash = () => cmd({ k: 'crash' });
const stop = () => cmd({ k: 'stop' });
const reopen = () => cmd({ k: 'reopen' });
const purge = () => cmd({ k: 'purge' });

const resource = fc.constantFrom<Resource>('R1', 'R2');
const loadName = fc.constantFrom<LoadName>('L1', 'L2', 'L3', 'L4');
const reading = fc.record({ resource, fix: fc.oneof({ weight: 4, arbitrary: fc.constant(true) }, { weight: 1, arbitrary: fc.constant(false) }), agoS: fc.constantFrom(0, 0, 0, 0, 2, 30) });
const fault = fc.oneof(
  fc.constantFrom<Fault>('lost', 'lost-twice', 'timeout', 'drop', '5xx', 'conflict'),
  fc.nat(9).map((n): Fault => `refuse:${n}`),
);
const command: fc.Arbitrary<Cmd> = fc.oneof(
  { weight: 8, arbitrary: fc.array(reading, { minLength: 1, maxLength: 4 }).map((rs) => ingest(...rs)) },
  { weight: 4, arbitrary: fc.constant(null).map(commit) },
  { weight: 3, arbitrary: fc.tuple(loadName, resource, fc.constantFrom(0, 0, 3, 20)).map(([l, r, from]) => start(l, r, from)) },
  { weight: 1, arbitrary: loadName.map(end) },
  { weight: 1, arbitrary: loadName.map(milestone) },
  {
    weight: 4,
    arbitrary: fc.oneof(fc.constant([] as Fault[]), fc.uniqueArray(fault, { minLength: 1, maxLength: 2, selector: (f) => f.split(':')[0] })).map((fs) => push(...fs)),
  },
  { weight: 1, arbitrary: fc.constant(null).map(crash) },
  { weight: 1, arbitrary: fc.constant(null).map(stop) },
  { weight: 3, arbitrary: fc.constant(null).map(reopen) },
  { weight: 1, arbitrary: fc.constant(null).map(purge) },
);
// Most days begin with a load or two on the trucks, so that most readings have somewhere to go.
const sequence = fc
  .tuple(
    fc.array(
      fc.tuple(loadName, resource).map(([l, r]) => start(l, r)),
      { maxLength: 2 },
    ),
    fc.array(command, { minLength: 1, maxLength: 40, size: 'max' }),
  )
  .map(([starts, rest]) => [...starts, ...rest]);

// ---- the model ----------------------------------------------------------------------------

/** When a sequence begins; each command moves the clock (model's and system's alike) 1 s on. */
const T0 = Date.UTC(2026, 5, 1, 12);

interface ModelReading extends ReadingSpec {
  serial: number;
  timeMs: number;
}
interface Committed extends ModelReading {
  /** The loads that must send it: open when it was committed, its time in their window. */
  owedTo: Set<string>;
  /** Loads that may send it: its time is in their window, but it came after they closed (item 4 makes these owed for a while). */
  lateFor: Set<string>;
  /** No open load held it when it was committed: kept unassigned until a load started `--from` takes it. */
  unassigned: boolean;
}

/** A load's window: from `load start`, to `load end`; closed by the first commit after its end (or a start of the daemon). */
interface ModelLoad {
  resource: Resource;
  fromMs: number;
  untilMs: number | null;
  closed: boolean;
}

/**
 * What the buffer owes, in the terms of docs/delivery.md: a reading is owed to each load that
 * is open when it is committed and holds its time in its window; only committed readings are
 * owed (a crash loses what waited in memory); the daemon commits the first reading it admits
 * at once, then when told (here: `commit`, a clean stop).
 */
class Model {
  nowMs = T0;
  up = true;
  private firstSinceStart = true;
  readonly loads = new Map<string, ModelLoad>();
  private pending: ModelReading[] = [];
  readonly committed = new Map<number, Committed>();
  readonly milestones = new Set<string>();
  /** Readings the service was told to refuse. */
  readonly refused = new Set<number>();
  private serial = 0;
  /** The time of the newest reading admitted, by resource. */
  private readonly newest = new Map<Resource, number>();

  constructor(private readonly outOfOrder = OUT_OF_ORDER) {}

  /** The daemon admits a reading (none while it is down); its serial rides as the odometer. */
  admit(spec: ReadingSpec): ModelReading | undefined {
    if (!this.up) return undefined;
    let timeMs = this.nowMs - spec.agoS * 1000;
    // Readings of a resource in time order, unless asked (see OUT_OF_ORDER).
    if (!this.outOfOrder) timeMs = Math.max(timeMs, this.newest.get(spec.resource) ?? timeMs);
    this.newest.set(spec.resource, timeMs);
    const r = { ...spec, serial: ++this.serial, timeMs };
    this.pending.push(r);
    if (this.firstSinceStart) this.commit();
    this.firstSinceStart = false;
    return r;
  }

  commit(): void {
    if (this.pending.length === 0) return;
    for (const r of this.pending) {
      const holding = [...this.loads].filter(([, l]) => l.resource === r.resource && r.timeMs >= l.fromMs && (l.untilMs === null || r.timeMs < l.untilMs));
      const owedTo = new Set(holding.filter(([, l]) => !l.closed).map(([n]) => n));
      const lateFor = new Set(holding.filter(([, l]) => l.closed).map(([n]) => n));
      // Kept either way: unassigned for loads.keep_unassigned_s, longer than any sequence.
      this.committed.set(r.serial, { ...r, owedTo, lateFor, unassigned: owedTo.size === 0 });
    }
    this.pending = [];
    this.closeEnded();
  }

  private closeEnded(): void {
    for (const l of this.loads.values()) if (l.untilMs !== null) l.closed = true;
  }

  start(load: LoadName, resource: Resource, fromAgoS = 0): void {
    if (this.loads.has(load)) return;
    const fromMs = this.nowMs - fromAgoS * 1000;
    this.loads.set(load, { resource, fromMs, untilMs: null, closed: false });
    // The resource's unassigned readings since then are the new load's, and no other's later.
    if (fromAgoS === 0) return;
    for (const r of this.committed.values()) {
      if (r.unassigned && r.resource === resource && r.timeMs >= fromMs) {
        r.owedTo.add(load);
        r.unassigned = false;
      }
    }
  }

  end(load: LoadName): void {
    const l = this.loads.get(load);
    if (l && l.untilMs === null) l.untilMs = this.nowMs;
  }

  crash(): void {
    this.pending = [];
    this.up = false;
  }

  stop(): void {
    this.commit();
    this.up = false;
  }

  reopen(): void {
    this.up = true;
    this.firstSinceStart = true;
    this.closeEnded();
  }
}

// ---- the system: the daemon's parts in-process, the CLI's connection, the sandbox -----------

const DEVICE = 'dev';
/** The client's timeout. */
const TIMEOUT_MS = 200;
/** How long an injected timeout holds the answer: undici checks its timeouts on a 0.5 s tick, so a timeout of 200 ms fires within about 1 s. */
const HELD_MS = TIMEOUT_MS + 1200;
const silent = createLogger({ level: 'silent', destination: process.stdout });

let sandbox: Sandbox;
/**
 * The points the service refuses: once refused, always (a service refuses what a point holds,
 * the same each time; one that changed its mind in the middle of a split could take a half and
 * then the whole, a case the ledger does not keep apart: see docs/delivery.md).
 */
let refusedRefs: string[] = [];
/** Keys of the requests the service stored (a `conflict` push answers 409 to these). */
let stored: Set<string>;
let events: SandboxEvent[];
/** Request-dependent faults of the push under way, applied by the sandbox's gate. */
const pushFaults = { timeouts: 0, conflict: false };

beforeAll(async () => {
  sandbox = new Sandbox({
    key: TEST_KEY,
    scac: TEST_SCAC,
    onRequest: (e) => {
      events.push(e);
      // Stored: taken (2xx), or taken with its answer lost; a refused request is not.
      if (e.body && e.idempotencyKey && ((e.status >= 200 && e.status < 300) || e.problem?.startsWith('accepted'))) stored.add(e.idempotencyKey);
    },
  });
  // Read before the sandbox looks at its faults: a timeout for the next request, a 409 for a key it has.
  sandbox.gate = (req) => {
    const key = String(req.headers['idempotency-key'] ?? '');
    sandbox.faults.forceStatus = pushFaults.conflict && stored.has(key) ? 409 : 0;
    // A body it took once it takes again (or answers 409): a service refuses by what a request
    // holds, and the same request held the same the first time.
    sandbox.faults.rejectTraceRefs = stored.has(key) ? [] : refusedRefs;
    sandbox.faults.latencyMs = pushFaults.timeouts > 0 ? HELD_MS : 0;
    if (pushFaults.timeouts > 0) pushFaults.timeouts -= 1;
    return undefined;
  };
  await sandbox.start();
});
afterAll(async () => {
  await sandbox.stop();
});

/** The daemon's parts as src/agent.ts wires them, on the virtual clock; undefined while it is down. */
interface Daemon {
  store: Store;
  ingest: Ingest;
  sender: Sender;
  client: ApiClient;
}

class Rig {
  daemon: Daemon | undefined;
  readonly config: Config;

  constructor(
    readonly model: Model,
    dir: string,
  ) {
    this.config = configSchema.parse({
      api: { base_url: sandbox.url, scac: TEST_SCAC },
      buffer: { path: join(dir, 'buffer.db') },
      // Every reading with a fix is a point: what sampling may skip is not the model's to say.
      sampling: { interval_s: 0 },
      // Small chunks: a few readings make a backlog, so chunks follow chunks and the newest position goes first.
      delivery: { max_traces_per_request: 3, drain_interval_ms: 0 },
      sources: [{ type: 'simulator', resource_id: 'R1' }],
    });
  }

  private get now(): number {
    return this.model.nowMs;
  }

  /** Start the daemon's buffer, ingest and sender on the file, as src/agent.ts does. */
  open(): void {
    const { config } = this;
    const store = Store.open(config.buffer.path, { synchronous: config.buffer.synchronous });
    store.closeEndedLoads(this.now);
    const ingest = new Ingest(store, { batchSize: 10_000, flushIntervalMs: 60_000, keepWithoutLoad: false, keepUnassignedMs: 3_600_000 }, silent, () => this.now);
    const client = new ApiClient({ baseUrl: sandbox.url, milestonePath: config.api.milestone_path, tracePath: config.api.trace_path, scac: TEST_SCAC, subscriptionKey: TEST_KEY, timeoutMs: TIMEOUT_MS });
    const sender = new Sender({ store, client, config, deviceId: DEVICE, log: silent, now: () => this.now, random: () => 0.5 });
    this.daemon = { store, ingest, sender, client };
  }

  /** Down: cleanly (what waits in memory is committed), or a crash (it is lost). */
  async close(clean: boolean): Promise<void> {
    const d = this.daemon;
    if (!d) return;
    this.daemon = undefined;
    if (clean) {
      await d.sender.stop();
      d.ingest.stop();
    } else {
      await d.sender.idle();
    }
    await d.client.close();
    d.store.close();
  }

  /** A CLI command: its own connection to the file, opened and closed around it. */
  cli(fn: (store: Store) => void): void {
    const store = Store.open(this.config.buffer.path, { synchronous: this.config.buffer.synchronous });
    try {
      fn(store);
    } catch (err) {
      // The CLI refuses a load number used before, or one it does not know: nothing changes.
      if (!(err instanceof LoadError)) throw err;
    } finally {
      store.close();
    }
  }

  async push(faults: Fault[]): Promise<void> {
    const d = this.daemon!;
    const refuse = faults.find((f) => f.startsWith('refuse:'));
    const rejectTraceRefs: string[] = [];
    if (refuse) {
      const due = d.store.listLoads(true).flatMap((l) => [...d.store.iterateReadings(l.loadNumber)].filter((r) => r.lat !== null));
      const r = due[Number(refuse.split(':')[1]) % Math.max(1, due.length)];
      if (r) {
        rejectTraceRefs.push(`${DEVICE}-${r.id}`);
        this.model.refused.add(r.odometer!);
      }
    }
    sandbox.setFaults({
      loseResponseNext: faults.includes('lost-twice') ? 2 : faults.includes('lost') ? 1 : 0,
      dropNext: faults.includes('drop') ? 1 : 0,
      failNext: faults.includes('5xx') ? 1 : 0,
    });
    refusedRefs = [...new Set([...refusedRefs, ...rejectTraceRefs])];
    pushFaults.timeouts = faults.includes('timeout') ? 1 : 0;
    pushFaults.conflict = faults.includes('conflict');
    try {
      // The backoff of a failure before is over: time has passed (its length is not the model's concern).
      d.sender.retryNow();
      d.sender.requestTracePush();
      await d.sender.kick();
      await d.sender.idle();
      // A request the client gave up on is still at the service: it is stored before the next push.
      await waitFor(() => events.length === sandbox.stats.requests, 5000, 'the sandbox to answer every request');
    } finally {
      sandbox.setFaults(NO_FAULTS);
      pushFaults.timeouts = 0;
      pushFaults.conflict = false;
    }
  }

  async apply(c: Cmd): Promise<void> {
    const { model } = this;
    model.nowMs += 1000;
    const d = this.daemon;
    switch (c.k) {
      case 'ingest':
        for (const spec of c.readings) {
          const r = model.admit(spec);
          if (!r) continue;
          const at = spec.fix ? { lat: 41.8 + r.serial * 1e-4, lon: -87.6 } : {};
          d!.ingest.admit({ resourceId: r.resource, timeMs: r.timeMs, ...at, odometer: r.serial, temperatureC: 4 });
        }
        return;
      case 'commit':
        if (!d) return;
        model.commit();
        d.ingest.flush();
        return;
      case 'start':
        model.start(c.load, c.resource, c.fromAgoS);
        return this.cli((s) => s.startLoad({ loadNumber: c.load, resourceId: c.resource, resourceType: 'Truck', stops: [], nowMs: this.now, fromMs: c.fromAgoS ? this.now - c.fromAgoS * 1000 : undefined }));
      case 'end':
        model.end(c.load);
        return this.cli((s) => s.endLoad(c.load, this.now));
      case 'milestone':
        if (!model.loads.has(c.load)) return;
        return this.cli((s) => model.milestones.add(recordMilestone(s, this.config, { loadNumber: c.load, code: 'X6' }, this.now).row.ref));
      case 'push':
        return d && this.push(c.faults);
      case 'crash':
        if (!d) return;
        model.crash();
        return this.close(false);
      case 'stop':
        if (!d) return;
        model.stop();
        return this.close(true);
      case 'reopen':
        if (d) return;
        model.reopen();
        return this.open();
      case 'purge':
        d?.store.purgeAcked();
        return;
    }
  }
}

// ---- a run and its check ------------------------------------------------------------------

type Problems = Partial<Record<Prop, string[]>>;

/** Run a sequence, then a push to a healthy service, and say what the model finds wrong (every property, enforced or not). */
async function runSequence(cmds: Cmd[], outOfOrder = OUT_OF_ORDER): Promise<Problems> {
  const tmp = tempDir('ta-model-');
  events = [];
  stored = new Set();
  refusedRefs = [];
  sandbox.reset();
  const rig = new Rig(new Model(outOfOrder), tmp.dir);
  try {
    rig.open();
    for (const c of cmds) await rig.apply(c);
    // The day ends: a clean stop commits what waits, and the next start pushes to a healthy service.
    for (const c of [stop(), reopen(), push()]) await rig.apply(c);
    return check(rig);
  } finally {
    await rig.close(false);
    tmp.cleanup();
  }
}

/** What the model finds wrong with what the service got, the dead letters and what is left due. */
function check(rig: Rig): Problems {
  const { model } = rig;
  const store = rig.daemon!.store;
  const problems: Problems = {};
  const fail = (p: Prop, what: string) => (problems[p] ??= []).push(what);
  const pointsOf = (traces: Array<{ odometer?: number }>) => traces.map((t) => t.odometer!);

  // Where each reading went, by load: the requests (keys) the service stored it in, or a dead letter.
  const keysOf = new Map<string, Set<string>>();
  const bodyOf = new Map<string, string>();
  for (const t of sandbox.traces) {
    const key = t.idempotencyKey!;
    const text = JSON.stringify(t.body);
    if (bodyOf.has(key) && bodyOf.get(key) !== text) fail('one-key', `key ${key} was stored with two different bodies`);
    bodyOf.set(key, text);
    for (const serial of pointsOf(t.body.traces)) {
      const at = `${t.body.loadNumber}#${serial}`;
      keysOf.set(at, (keysOf.get(at) ?? new Set()).add(key));
    }
  }
  const deadTraces = store.listDeadLetters().filter((d) => d.kind === 'trace');
  const serialsOf = (d: (typeof deadTraces)[number]) => pointsOf((d.body as { traces: Array<{ odometer?: number }> }).traces);
  const parked = new Set(deadTraces.flatMap((d) => serialsOf(d).map((serial) => `${d.loadNumber}#${serial}`)));
  // A request refused alike in both halves is parked whole (refusals by scope, docs/delivery.md):
  // its points wait with the one the service refused, though it did not refuse each of them.
  const parkedWithRefused = new Set(deadTraces.filter((d) => serialsOf(d).some((serial) => model.refused.has(serial))).flatMap((d) => serialsOf(d).map((serial) => `${d.loadNumber}#${serial}`)));

  for (const [at, keys] of keysOf) if (keys.size > 1) fail('one-key', `reading ${at} reached the service in ${keys.size} requests with different keys`);
  for (const at of [...keysOf.keys(), ...parked]) {
    const [load, serial] = [at.split('#')[0], Number(at.split('#')[1])];
    const r = model.committed.get(serial);
    if (!r || !(r.owedTo.has(load) || r.lateFor.has(load))) fail('in-window', `reading ${at} went to load ${load}, whose window does not hold it`);
    if (parked.has(at) && !parkedWithRefused.has(at)) fail('delivered', `reading ${at} is a dead letter, but the service never refused it or a point parked with it`);
  }
  for (const r of model.committed.values()) {
    for (const load of r.owedTo) {
      if (r.fix && !keysOf.has(`${load}#${r.serial}`) && !parked.has(`${load}#${r.serial}`)) fail('delivered', `reading ${load}#${r.serial} was committed in the window but never delivered`);
    }
  }

  const gotMilestones = new Map<string, Set<string>>();
  for (const m of sandbox.milestones) gotMilestones.set(m.idempotencyKey!, (gotMilestones.get(m.idempotencyKey!) ?? new Set()).add(JSON.stringify(m.body)));
  for (const ref of model.milestones) if (!gotMilestones.has(ref)) fail('milestones', `milestone ${ref} was confirmed but never delivered`);
  for (const [ref, bodies] of gotMilestones) {
    if (!model.milestones.has(ref)) fail('milestones', `milestone ${ref} was delivered but never confirmed`);
    if (bodies.size > 1) fail('milestones', `milestone ${ref} was sent with ${bodies.size} different bodies`);
  }

  if (store.counts().pendingMilestones > 0) fail('nothing-due', `${store.counts().pendingMilestones} milestones still pending`);
  for (const l of store.listLoads(true)) {
    for (const r of store.iterateReadings(l.loadNumber)) fail(r.lat === null ? 'temperature-settles' : 'nothing-due', `reading ${l.loadNumber}#${r.odometer} is still due`);
  }
  return problems;
}

/** Throws with the broken properties, enforced ones only. */
function assertKept(problems: Problems, enforced: ReadonlySet<Prop>): void {
  const broken = (Object.keys(problems) as Prop[]).filter((p) => enforced.has(p));
  if (broken.length > 0) throw new Error(broken.map((p) => `${p}: ${PROPERTIES[p]}\n  ${problems[p]!.slice(0, 5).join('\n  ')}`).join('\n'));
}

describe('the ledger against its model', () => {
  it(`keeps every property over ${RUNS} random sequences (${[...ENFORCED].join(', ')})`, { timeout: 60_000 + RUNS * 3_000 }, async () => {
    await fc.assert(
      fc.asyncProperty(sequence, async (cmds) => assertKept(await runSequence(cmds), ENFORCED)),
      { numRuns: RUNS, seed: SEED, path: PATH, endOnFailure: PATH !== undefined, verbose: 1 },
    );
  });

  it('keeps every property through a day with every kind of trouble', async () => {
    // A sequence written out, so that each command is seen to work (the random ones may miss some).
    const day = [
      start('L1', 'R1'),
      start('L2', 'R1'),
      start('L3', 'R2'),
      ingest(fix('R1'), fix('R2'), temp('R2')),
      ...[1, 2, 3, 4].map(() => ingest(fix('R1'), fix('R2'))),
      commit(),
      milestone('L1'),
      push('refuse:2', 'conflict'),
      ingest(fix('R1'), fix('R2', 30)),
      end('L2'),
      ingest(fix('R1', 2)),
      commit(),
      push('5xx'),
      push('drop'),
      crash(),
      ingest(fix('R1')),
      reopen(),
      ingest(fix('R1')),
      push(),
      purge(),
      milestone('L3'),
      push('lost'),
      stop(),
    ];
    const problems = await runSequence(day);
    assertKept(problems, ENFORCED);
    // What the day went through, so that a change to the rig that skips a command is seen.
    expect(sandbox.stats.faults).toMatchObject({ failed: 1, dropped: 2 });
    expect(sandbox.stats.faults.rejected).toBeGreaterThan(0);
    expect(sandbox.milestones.length).toBeGreaterThanOrEqual(2);
  });
});

/** What the model found, each in the shortest sequence it shrank to: kept now, every property. */
async function expectKept(cmds: Cmd[], outOfOrder = false): Promise<void> {
  assertKept(await runSequence(cmds, outOfOrder), new Set(Object.keys(PROPERTIES) as Prop[]));
}

describe('what the model found, replayed', () => {
  it('item 2: a retry after a lost answer carried the readings committed since, under a new key', async () => {
    // Found by `npm run test:model -- --props one-key --seed 3` after 103 runs, shrunk to this.
    await expectKept([start('L1', 'R2'), ingest(fix('R2')), push('lost'), ingest(fix('R2')), purge()]);
  });

  it('item 2: after a lost answer, the newest position that went first went again in a chunk of the backlog', async () => {
    // The same with push('timeout'), which takes a second longer.
    const backlog = [1, 2, 3, 4, 5].map(() => ingest(fix('R1')));
    await expectKept([start('L1', 'R1'), ...backlog, commit(), push('lost'), ingest(fix('R1')), commit(), push()]);
  });

  it('item 5: a reading without a fix of an active load stayed due after every push', async () => {
    await expectKept([start('L1', 'R2'), ingest(temp('R2'), fix('R1'))]);
  });

  it('a reading older than the last point sent was never sent, and stayed due while its load was active', async () => {
    // Found by `npm run test:model -- --props all --out-of-order`.
    await expectKept([start('L1', 'R2'), ingest(fix('R2')), ingest(fix('R2', 2)), commit(), push()], true);
  });

  it('a point refused after its request timed out, then refused again: parked, never taken for delivered', async () => {
    // Found by `npm run test:model -- --props all --runs 200 --seed 3` once the first fixes were
    // in; it was the model's service that answered 409 to a key it had refused (now it stores
    // only what it takes), and the sequence is kept as a check of the refusal after a timeout.
    await expectKept([start('L1', 'R1'), ingest(fix('R1'), temp('R1')), push('refuse:0', 'timeout'), push('conflict', 'refuse:0'), stop()]);
  });
});
