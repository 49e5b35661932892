/**
 * MQTT QoS 1 at least once, end to end: a message is acknowledged to the broker only once the
 * reading it holds is committed, so a daemon killed before its commit gets the message again
 * from its persistent session. Real mosquitto (with persistence), the built daemon killed with
 * SIGKILL, the real sandbox as the service, the buffer read from its SQLite file.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { connect as mqttConnect, type MqttClient } from 'mqtt';
import { afterEach, describe, expect, it } from 'vitest';
import { Ingest } from '../../src/admission/ingest.js';
import { Store } from '../../src/buffer/store.js';
import { mqttSourceSchema } from '../../src/config/schema.js';
import { createLogger } from '../../src/log.js';
import { Sandbox } from '../../src/sandbox/server.js';
import { IngestCommits } from '../../src/sources/commits.js';
import { MqttSource } from '../../src/sources/mqtt.js';
import { agentConfig, runCli, startDaemon, TEST_KEY, TEST_SCAC, waitFor, type Daemon } from '../helpers.js';
import { Broker, mqttSourceToml, NO_MOSQUITTO } from './mosquitto.js';
import { freePort, sleep } from './support.js';

/** The message numbers (odometer) the buffer holds for the trailer. */
function numbersIn(db: string | Database.Database): number[] {
  const d = typeof db === 'string' ? new Database(db) : db;
  try {
    return (d.prepare("SELECT DISTINCT odometer FROM readings WHERE resource_id = 'TRAILER-1' ORDER BY odometer").pluck().all() as number[]).filter((n) => n > 0);
  } finally {
    if (typeof db === 'string') d.close();
  }
}

const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);

describe.skipIf(NO_MOSQUITTO)('MQTT QoS 1 acknowledgements in process (real mosquitto, a real buffer file)', () => {
  let dir: string;
  let broker: Broker;
  let store: Store;
  /** false: the buffer says it has no room (commits fail as on a full disk). */
  let room = true;
  const running: Array<{ s: MqttSource; ingest: Ingest }> = [];
  let gateway: MqttClient | undefined;

  afterEach(async () => {
    for (const r of running.splice(0)) {
      await r.s.stop();
      r.ingest.stop();
    }
    await gateway?.endAsync(true);
    await broker.stop();
    store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  async function start() {
    room = true;
    dir = mkdtempSync(join(tmpdir(), 'ta-mqtt-ack-'));
    broker = new Broker(join(dir, 'broker'), await freePort());
    await broker.start();
    store = Store.open(join(dir, 'buffer.db'));
    gateway = mqttConnect(broker.url, { clientId: 'gateway' });
    await new Promise<void>((r) => gateway!.once('connect', () => r()));
  }

  /** The agent's side: a source, its admission and the buffer's commits, as the daemon wires them. */
  async function agent(opts: { maxPending?: number; flushIntervalMs?: number } = {}) {
    const log = createLogger({ level: 'silent' });
    const ingest = new Ingest(
      { roomForReadings: (n) => room && store.roomForReadings(n), insertReadings: store.insertReadings, bump: store.bump, db: store.db },
      { batchSize: 500, flushIntervalMs: opts.flushIntervalMs ?? 60_000, keepWithoutLoad: true, maxPending: opts.maxPending },
      log,
    );
    const intake = ingest.intake('mqtt', log);
    const cfg = mqttSourceSchema.parse({
      type: 'mqtt',
      url: broker.url,
      topics: ['fleet/+/telemetry'],
      resource_from_topic: 2,
      client_id: 'acker',
      ack_delay_ms: 100,
      receive_maximum: 10,
      reconnect_initial_s: 0.1,
      reconnect_max_s: 0.5,
    });
    const s = new MqttSource(cfg, { emit: intake.emit, reject: intake.reject, log, counts: intake.counts, commits: new IngestCommits(ingest), find: intake.find });
    running.push({ s, ingest });
    await s.start();
    await waitFor(() => s.health().healthy, 10_000, 'connected and subscribed');
    return { s, ingest, intake };
  }

  const publish = (n: number | string) => gateway!.publishAsync('fleet/TRAILER-1/telemetry', typeof n === 'string' ? n : JSON.stringify({ temperature: -18, odometer: n }), { qos: 1 });

  it('acknowledges a message once its reading is committed, a refused one in its turn, and not one whose commit failed', async () => {
    await start();
    const first = await agent();
    await publish('not json');
    await publish(1);
    await waitFor(() => first.intake.counts.rejected === 1 && numbersIn(store.db).includes(1), 10_000, 'the refused message and the first reading committed');
    // The disk is full: readings wait in memory, their messages are not acknowledged.
    room = false;
    for (const n of range(2, 6)) await publish(n);
    await waitFor(() => first.intake.counts.readings === 6, 10_000, 'five more readings taken');
    await sleep(500);
    expect(first.ingest.stats.trouble?.kind).toBe('disk-full');
    expect(numbersIn(store.db)).toEqual([1]);
    // Gone before a commit could be made (its stop tries one: still no room).
    await first.s.stop();

    room = true;
    const second = await agent();
    await waitFor(() => numbersIn(store.db).length === 6, 10_000, 'the five uncommitted messages sent again and committed');
    expect(numbersIn(store.db)).toEqual(range(1, 6));
    // Sent again: exactly those not acknowledged. The refused one and the first were.
    expect(second.intake.counts).toMatchObject({ readings: 5, rejected: 0 });
  });

  const T = Date.UTC(2026, 10, 26, 12);
  /** A message with its own time: told apart from a new one when it comes again. */
  const timed = (n: number) => gateway!.publishAsync('fleet/TRAILER-1/telemetry', JSON.stringify({ time: T + n * 1000, temperature: -18, odometer: n }), { qos: 1 });
  const trailerRows = () => store.db.prepare("SELECT odometer FROM readings WHERE resource_id = 'TRAILER-1' ORDER BY id").pluck().all();
  /** The source's connection lost (its socket destroyed): it connects again, the broker sends again what was not acknowledged. */
  const cut = (s: MqttSource) => (s as unknown as { client: { stream: { destroy(): void } } }).client.stream.destroy();

  it('takes a message the broker sends again (DUP) after a lost connection once: waiting for its commit, or committed already', async () => {
    await start();
    const a = await agent({ flushIntervalMs: 60_000 });
    // No room (a full disk): the readings wait in memory, their messages unacknowledged.
    room = false;
    for (const n of range(1, 3)) await timed(n);
    await waitFor(() => a.intake.counts.readings === 3, 10_000, 'three readings taken, waiting for their commit');
    // The connection is lost before the commit: none was acknowledged, the broker sends the three again.
    cut(a.s);
    await waitFor(() => a.s.health().counters.duplicates === 3, 10_000, 'the three sent again, recognised');
    expect(a.ingest.stats.pending).toBe(3);
    expect(a.ingest.find({ resourceId: 'TRAILER-1', timeMs: T + 2000, temperatureC: -18 }, a.intake.name)).toBe(1);
    room = true;
    a.ingest.flush(true);
    expect(trailerRows()).toEqual([1, 2, 3]);
    // Committed, and a redelivery of a committed message (its PUBACK lost): recognised in the buffer.
    expect(a.ingest.find({ resourceId: 'TRAILER-1', timeMs: T + 2000, temperatureC: -18 }, a.intake.name)).toBe('stored');
    // Not the same reading: another time, another temperature, another source.
    expect(a.ingest.find({ resourceId: 'TRAILER-1', timeMs: T + 4000, temperatureC: -18 }, a.intake.name)).toBeUndefined();
    expect(a.ingest.find({ resourceId: 'TRAILER-1', timeMs: T + 2000, temperatureC: -17.5 }, a.intake.name)).toBeUndefined();
    expect(a.ingest.find({ resourceId: 'TRAILER-1', timeMs: T + 2000, temperatureC: -18 }, 'exec:reefer')).toBeUndefined();
    // Their PUBACKs went with that commit, and the connection is lost again at once: whatever
    // the broker sends again now (a PUBACK lost with the socket) is in the buffer, and not
    // taken; a new message is.
    await waitFor(() => a.s.health().healthy, 10_000, 'connected again');
    cut(a.s);
    await waitFor(() => a.s.health().counters.connects === 3 && a.s.health().healthy, 10_000, 'connected a third time');
    await timed(4);
    await waitFor(() => a.intake.counts.readings === 4, 10_000, 'the fourth taken');
    const { messages, duplicates } = a.s.health().counters;
    expect(messages - duplicates).toBe(4);
    a.ingest.flush(true);
    expect(trailerRows()).toEqual([1, 2, 3, 4]);
  });

  it('does not acknowledge a message sent again whose waiting copy is then dropped from memory: it comes once more and is taken', async () => {
    await start();
    const a = await agent({ maxPending: 20, flushIntervalMs: 200 });
    room = false;
    for (const n of range(1, 3)) await timed(n);
    await waitFor(() => a.intake.counts.readings === 3, 10_000, 'three readings taken, waiting for their commit');
    cut(a.s);
    await waitFor(() => a.s.health().counters.duplicates === 3, 10_000, 'the three sent again, recognised as waiting');
    // Another source fills memory to buffer.max_pending and one past it while the disk is
    // full: the three waiting copies, and only they, are dropped. The messages sent again must
    // not be acknowledged for them.
    for (let i = 0; i < 20; i++) a.ingest.admit({ resourceId: 'TRUCK-9', timeMs: Date.now(), lat: 41.8, lon: -87.6 });
    expect(a.ingest.stats.droppedPending).toBe(3);
    room = true;
    a.ingest.start();
    await waitFor(() => trailerRows().length === 3, 15_000, 'the three sent once more after a reconnect, and committed');
    expect(trailerRows()).toEqual([1, 2, 3]);
  });

  it('does not acknowledge a message whose reading was dropped from memory: it reconnects once commits work and the broker sends it again', async () => {
    await start();
    const a = await agent({ maxPending: 20, flushIntervalMs: 200 });
    room = false;
    for (const n of range(1, 5)) await publish(n);
    await waitFor(() => a.intake.counts.readings === 5, 10_000, 'five readings taken');
    // Another source fills memory past buffer.max_pending while the disk is full: the oldest
    // readings, the five messages', are dropped.
    for (let i = 0; i < 30; i++) a.ingest.admit({ resourceId: 'TRUCK-9', timeMs: Date.now(), lat: 41.8, lon: -87.6 });
    expect(a.ingest.stats.droppedPending).toBe(15);
    await sleep(300);
    expect(a.s.health().counters.connects).toBe(1);
    room = true;
    a.ingest.start();
    await waitFor(() => numbersIn(store.db).length === 5, 15_000, 'the five messages sent again after a reconnect, and committed');
    expect(a.s.health().counters).toMatchObject({ droppedBeforeCommit: 5, connects: 2 });
  });
});

describe.skipIf(NO_MOSQUITTO)('MQTT QoS 1 acknowledged after the commit (real mosquitto, the daemon killed with SIGKILL)', () => {
  let dir: string | undefined;
  const daemons: Daemon[] = [];
  let broker: Broker | undefined;
  let gateway: MqttClient | undefined;
  const sandbox = new Sandbox({ key: TEST_KEY, scac: TEST_SCAC });
  afterEach(async () => {
    for (const d of daemons.splice(0)) await d.stop('SIGKILL');
    await gateway?.endAsync(true);
    await broker?.stop();
    await sandbox.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  /**
   * A broker (with persistence), the sandbox, and a daemon's config with an mqtt source
   * (`extra`: more of its keys), commits a minute apart, a health listener whose /metrics
   * `metric` reads by name.
   */
  async function setUp(extra = '') {
    const d = mkdtempSync(join(tmpdir(), 'ta-mqtt-ack-'));
    const b = new Broker(join(d, 'broker'), await freePort());
    dir = d;
    broker = b;
    await b.start();
    const { url } = await sandbox.start();
    const healthPort = await freePort();
    const metric = async (name: string): Promise<number | undefined> => {
      const r = await fetch(`http://127.0.0.1:${healthPort}/metrics`).catch(() => undefined);
      const m = r && new RegExp(`^${name}(\\{[^}]*\\})? (\\d+)$`, 'm').exec(await r.text());
      return m ? Number(m[2]) : undefined;
    };
    const toml = `${mqttSourceToml(b.url, extra)}[health]\nlisten = "127.0.0.1:${healthPort}"\n[privacy]\nrecord_without_load = true\n`;
    return { cfg: agentConfig(d, url, toml, { flushMs: 60_000 }), metric, broker: b, db: join(d, 'buffer.db') };
  }

  it('loses no message the daemon took but had not committed when it was killed: the broker sends it again', async () => {
    // Commits a minute apart: without acknowledgements tied to commits, everything taken
    // after the first reading is only in memory when the daemon is killed.
    const { cfg, metric, broker, db } = await setUp();
    const first = startDaemon(['--config', cfg]);
    daemons.push(first);
    await waitFor(async () => (await metric('telematics_source_healthy')) === 1, 15_000, 'the MQTT source connected and subscribed');

    gateway = mqttConnect(broker.url, { clientId: 'gateway' });
    await new Promise<void>((r) => gateway!.once('connect', () => r()));
    const publish = (n: number) => gateway!.publishAsync('depot/TRAILER-1/reefer', JSON.stringify({ temperature: -18, odometer: n }), { qos: 1 });
    // The first reading of a run is committed at once (status shows readings arrive): out of the way.
    await publish(0);
    await waitFor(async () => (await metric('telematics_source_readings_total')) === 1 && (await metric('telematics_readings_pending')) === 0, 10_000, 'the first reading committed');

    const N = 50;
    await Promise.all(Array.from({ length: N }, (_, i) => publish(i + 1)));
    await waitFor(async () => (await metric('telematics_source_readings_total')) === N + 1, 10_000, `the daemon taking all ${N} messages`);
    // Taken, not committed yet: a power cut now.
    await first.stop('SIGKILL');
    const committedBeforeKill = numbersIn(db);
    // Killed before the commit (ack_delay_ms, 500 ms, after the first of them): the case at hand.
    expect(committedBeforeKill.length).toBeLessThan(N);

    const second = startDaemon(['--config', cfg]);
    daemons.push(second);
    const all = Array.from({ length: N }, (_, i) => i + 1);
    await waitFor(() => numbersIn(db).length === N, 15_000, `all ${N} messages in the buffer after the restart`).catch(() => undefined);
    expect(
      all.filter((n) => !numbersIn(db).includes(n)),
      `lost after the kill (${committedBeforeKill.length} committed before it)`,
    ).toEqual([]);
  }, 60_000);

  it('takes a timed message the broker sends again after it restarted once, not twice', async () => {
    // Acknowledgements and commits a minute apart: the readings wait in memory, unacknowledged.
    const { cfg, metric, broker, db } = await setUp('ack_delay_ms = 60000\n');
    const daemon = startDaemon(['--config', cfg]);
    daemons.push(daemon);
    await waitFor(async () => (await metric('telematics_source_healthy')) === 1, 15_000, 'the MQTT source connected and subscribed');
    gateway = mqttConnect(broker.url, { clientId: 'gateway' });
    await new Promise<void>((r) => gateway!.once('connect', () => r()));
    const T = Date.UTC(2026, 10, 26, 12);
    const publish = (n: number) => gateway!.publishAsync('depot/TRAILER-1/reefer', JSON.stringify({ time: T + n * 1000, temperature: -18, odometer: n }), { qos: 1 });
    for (let n = 1; n <= 5; n++) await publish(n);
    await waitFor(async () => (await metric('telematics_source_readings_total')) === 5, 15_000, 'five readings taken');
    // The broker restarts: the agent's connection is lost; the five come again (DUP), before a sixth.
    await gateway.endAsync(true);
    await broker.stop();
    await broker.start();
    await waitFor(async () => (await metric('telematics_source_healthy')) === 1, 15_000, 'connected again');
    gateway = mqttConnect(broker.url, { clientId: 'gateway' });
    await new Promise<void>((r) => gateway!.once('connect', () => r()));
    await publish(6);
    await waitFor(async () => (await metric('telematics_source_readings_total')) === 6, 15_000, 'the sixth taken (and the five again not)');
    expect((await daemon.stop('SIGTERM')).code).toBe(0);
    // The broker did send them again (all but the first, committed and acknowledged at once), and they were not taken.
    const status = JSON.parse((await runCli(['status', '--json', '--config', cfg])).stdout) as { sources: Array<{ counters: Record<string, number> }> };
    const { messages, duplicates } = status.sources[0]!.counters;
    expect(duplicates).toBeGreaterThanOrEqual(3);
    expect(messages! - duplicates!).toBe(6);
    const d = new Database(db, { readonly: true });
    try {
      expect(d.prepare("SELECT odometer FROM readings WHERE resource_id = 'TRAILER-1' ORDER BY id").pluck().all()).toEqual([1, 2, 3, 4, 5, 6]);
    } finally {
      d.close();
    }
  }, 60_000);
});
