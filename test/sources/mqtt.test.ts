import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { type AddressInfo, createServer, type Socket, connect as tcpConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect as mqttConnect, type MqttClient } from 'mqtt';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { configSchema, type MqttSourceConfig, mqttSourceSchema } from '../../src/config/schema.js';
import { parseConfigText } from '../../src/config/load.js';
import { MqttDecoder, MqttSource, topicMatches } from '../../src/sources/mqtt.js';
import { makePki } from '../pki.js';
import { waitFor } from '../helpers.js';
import { Broker, NO_MOSQUITTO } from './mosquitto.js';
import { freePort, recorder } from './support.js';

const NOW = Date.parse('2026-11-24T12:00:00Z');
const decoder = (o: Partial<ConstructorParameters<typeof MqttDecoder>[0]> = {}) => new MqttDecoder({ fields: {}, temperatureUnit: 'C', maxMessageBytes: 65_536, ...o });
const msg = (v: unknown) => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v));

describe('MQTT payloads', () => {
  it('takes a reading in the exec line format, or an array of them', () => {
    const one = decoder().decode('t', msg({ resourceId: 'TRAILER-7', time: '2026-11-24T11:59:00Z', latitude: 41.8, longitude: -87.6, speed: 12.5, heading: 90, odometer: 1000, temperature: -18.2 }), NOW);
    expect(one.problems).toEqual([]);
    expect(one.readings).toEqual([
      { where: 'topic t', timed: true, reading: { resourceId: 'TRAILER-7', timeMs: Date.parse('2026-11-24T11:59:00Z'), lat: 41.8, lon: -87.6, speed: 12.5, heading: 90, odometer: 1000, temperatureC: -18.2 } },
    ]);
    const many = decoder().decode(
      't',
      msg([
        { resourceId: 'A', temperature: 5 },
        { resourceId: 'B', temperature: 41, temperatureUnit: 'F' },
      ]),
      NOW,
    );
    expect(many.readings.map((r) => [r.where, r.reading.resourceId, r.reading.temperatureC, r.reading.timeMs])).toEqual([
      ['topic t [0]', 'A', 5, NOW],
      ['topic t [1]', 'B', 5, NOW],
    ]);
  });

  it('maps other names with `fields` (dotted into objects), and reads epoch seconds, milliseconds and ISO times', () => {
    const d = decoder({ fields: { resourceId: 'dev', temperature: 'temp_c', time: 'ts', latitude: 'gps.lat', longitude: 'gps.lon' } });
    const s = d.decode('t', msg({ dev: 'R1', temp_c: 3.5, ts: 1_795_000_000, gps: { lat: 1, lon: 2 }, rssi: -70 }), NOW);
    expect(s.readings[0].reading).toMatchObject({ resourceId: 'R1', temperatureC: 3.5, timeMs: 1_795_000_000_000, lat: 1, lon: 2 });
    expect(d.decode('t', msg({ dev: 'R1', temp_c: 3.5, ts: 1_795_000_000_123 }), NOW).readings[0].reading.timeMs).toBe(1_795_000_000_123);
    expect(d.decode('t', msg({ dev: 'R1', temp_c: 3.5, ts: '2026-11-24T13:00:00+01:00' }), NOW).readings[0].reading.timeMs).toBe(Date.parse('2026-11-24T12:00:00Z'));
    // The names the fields table replaced are not read any more.
    expect(d.decode('t', msg({ resourceId: 'R1', temperature: 3 }), NOW).problems[0].text).toBe('topic t: dev: missing (or set resource_from_topic)');
  });

  it('takes the resource id from a level of the topic', () => {
    const d = decoder({ resourceFromTopic: 2 });
    expect(d.decode('fleet/TRAILER-9/telemetry', msg({ temperature: 4 }), NOW).readings[0].reading.resourceId).toBe('TRAILER-9');
    // The topic wins over the payload: the gateway names the trailer by where it publishes.
    expect(d.decode('fleet/TRAILER-9/telemetry', msg({ resourceId: 'X', temperature: 4 }), NOW).readings[0].reading.resourceId).toBe('TRAILER-9');
    expect(d.decode('fleet', msg({ temperature: 4 }), NOW).problems).toEqual([{ reason: 'invalid', text: 'topic fleet: topic "fleet" has no level 2 (resource_from_topic)' }]);
  });

  it('refuses bad messages by reason, naming the field, and keeps the good readings of an array', () => {
    const d = decoder({ maxMessageBytes: 256 });
    expect(d.decode('t', Buffer.alloc(257, 0x20), NOW).problems).toEqual([{ reason: 'tooLarge', text: 'topic t: message of 257 bytes, more than max_message_bytes (256); dropped' }]);
    expect(d.decode('t', msg('{"resourceId": '), NOW).problems[0]).toMatchObject({ reason: 'notJson' });
    expect(d.decode('t', Buffer.from([0xff, 0xfe, 0x00, 0x01]), NOW).problems[0]).toMatchObject({ reason: 'notJson' });
    const mixed = d.decode('t', msg([{ resourceId: 'A', latitude: '41.8', longitude: 1 }, { resourceId: 'B', temperature: 1 }, 7, { resourceId: 'C', time: 'yesterday', temperature: 1 }]), NOW);
    expect(mixed.readings.map((r) => r.reading.resourceId)).toEqual(['B']);
    expect(mixed.problems).toEqual([
      { reason: 'invalid', text: 'topic t [0]: latitude: expected a number, got "41.8"' },
      { reason: 'invalid', text: 'topic t [2]: expected a JSON object (a reading), got number' },
      { reason: 'invalid', text: 'topic t [3]: time: expected an ISO 8601 time with Z or an offset, or epoch seconds or milliseconds, got "yesterday"' },
    ]);
    expect(d.decode('t', msg([]), NOW).problems).toEqual([{ reason: 'invalid', text: 'topic t: an empty array, no reading' }]);
  });

  it('is not fooled by hostile payloads', () => {
    const d = decoder({ fields: { temperature: 'a.b' } });
    // Inherited properties are not fields: __proto__ names nothing, and nothing is polluted.
    const proto = d.decode('t', msg('{"__proto__": {"resourceId": "X"}, "a": {"__proto__": {"b": 5}}}'), NOW);
    expect(proto.readings).toEqual([]);
    expect(proto.problems[0].text).toBe('topic t: resourceId: missing (or set resource_from_topic)');
    expect(({} as Record<string, unknown>).resourceId).toBeUndefined();
    // Deep nesting, huge numbers, a wrong type at every field: refused, never thrown.
    const deep = `${'['.repeat(5000)}${']'.repeat(5000)}`;
    expect(() => decoder().decode('t', msg(deep), NOW)).not.toThrow();
    expect(decoder().decode('t', msg('{"resourceId": "A", "latitude": 1e400, "longitude": 1}'), NOW).problems[0].text).toBe('topic t: latitude: expected a finite number');
    expect(decoder().decode('t', msg({ resourceId: ['A'], temperature: 1 }), NOW).problems[0].text).toBe('topic t: resourceId: expected a string, got an array');
    // Nested deep inside a field: described by its type, never serialised (which throws).
    const nested = `${'['.repeat(20_000)}${']'.repeat(20_000)}`;
    expect(decoder().decode('t', msg(`{"resourceId": "A", "latitude": ${nested}, "longitude": 1}`), NOW).problems[0].text).toBe('topic t: latitude: expected a number, got an array');
    expect(decoder().decode('t', msg(`{"resourceId": "A", "temperature": 1, "time": {"a": ${nested}}}`), NOW).problems[0].text).toBe(
      'topic t: time: expected an ISO 8601 time with Z or an offset, or epoch seconds or milliseconds, got an object',
    );
    expect(decoder().decode('t', msg({ resourceId: 'A'.repeat(65), temperature: 1 }), NOW).problems[0].text).toBe('topic t: resourceId: expected 1 to 64 characters');
  });
});

describe('MQTT source config', () => {
  const base = { type: 'mqtt', url: 'mqtt://broker:1883', topics: ['fleet/+/telemetry'] };
  it('has defaults for a persistent QoS 1 session', () => {
    expect(mqttSourceSchema.parse(base)).toMatchObject({ qos: 1, clean: false, max_message_bytes: 65_536, fields: {}, temperature_unit: 'C' });
  });

  it('refuses what cannot work, naming the key', () => {
    const problems = (extra: Record<string, unknown>) => {
      const r = configSchema.safeParse({ api: { base_url: 'http://x', scac: 'ABCD' }, sources: [{ ...base, ...extra }] });
      return r.success ? [] : r.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`);
    };
    expect(problems({ url: 'http://broker' })).toEqual(['sources.0.url: expected mqtt://, mqtts://, ws:// or wss://, not http://']);
    expect(problems({ url: 'mqtt://u:secret@broker' })).toEqual(['sources.0.url: a password in the URL: put it in password_file, and the user name in username']);
    expect(problems({ topics: ['fleet/#/x'] })).toEqual(['sources.0.topics.0: "#" must be a whole level and the last one (e.g. "fleet/#"): "fleet/#/x"']);
    expect(problems({ topics: ['fleet/a+/x'] })).toEqual(['sources.0.topics.0: "+" must be a whole level (e.g. "fleet/+/telemetry"): "fleet/a+/x"']);
    expect(problems({ qos: 2 })[0]).toMatch(/^sources\.0\.qos/);
    expect(problems({ fields: { temp: 'temp_c' } })).toEqual([
      'sources.0.fields.temp: not a reading field; expected one of resourceId, time, latitude, longitude, speed, heading, odometer, temperature, temperatureUnit',
    ]);
    expect(problems({ password_file: '/p' })).toEqual(['sources.0.username: expected a user name with password_file']);
  });

  it('gives each MQTT source a client id of its own that survives restarts and edits, and takes files relative to the config', async () => {
    const { loadConfig } = await import('../../src/config/load.js');
    const dir = mkdtempSync(join(tmpdir(), 'ta-mqtt-cfg-'));
    try {
      const file = join(dir, 'agent.toml');
      const head = 'device_id = "depot-7"\n[api]\nbase_url = "http://x"\nscac = "ABCD"\n';
      const src = (topic: string, extra = '') => `[[sources]]\ntype = "mqtt"\nurl = "mqtt://b"\ntopics = ["${topic}"]\nusername = "u"\npassword_file = "pw"\n${extra}`;
      writeFileSync(file, `${head}${src('t1')}`);
      const one = loadConfig(file).config.sources as MqttSourceConfig[];
      expect(one[0]).toMatchObject({ client_id: 'telematics-agent-depot-7', password_file: join(dir, 'pw') });
      // Several: by name, so adding or moving one does not hand its session to another.
      writeFileSync(file, `${head}${src('t2', 'name = "dock"\n')}${src('t1', 'name = "yard"\n')}`);
      expect((loadConfig(file).config.sources as MqttSourceConfig[]).map((s) => s.client_id)).toEqual(['telematics-agent-depot-7-dock', 'telematics-agent-depot-7-yard']);
      writeFileSync(file, `${head}${src('t1')}${src('t2', 'client_id = "mine"\n')}`);
      expect(() => loadConfig(file)).toThrow('sources[0].client_id: several MQTT sources: give each a client_id (or a name), the broker keeps each session under it');
      expect(parseConfigText(`${head}${src('t1', 'client_id = "mine"\n')}`, file).sources[0]).toMatchObject({ client_id: 'mine' });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('matches topics as the broker does', () => {
    expect(topicMatches('fleet/+/telemetry', 'fleet/T1/telemetry')).toBe(true);
    expect(topicMatches('fleet/+/telemetry', 'fleet/T1/other')).toBe(false);
    expect(topicMatches('fleet/+/telemetry', 'fleet/T1/telemetry/x')).toBe(false);
    expect(topicMatches('fleet/#', 'fleet')).toBe(true);
    expect(topicMatches('fleet/#', 'fleet/a/b/c')).toBe(true);
    expect(topicMatches('#', '$SYS/broker/uptime')).toBe(false);
    expect(topicMatches('+/x', '$SYS/x')).toBe(false);
    expect(topicMatches('a/b', 'a/b')).toBe(true);
  });
});

describe.skipIf(NO_MOSQUITTO)('MQTT source against a real broker (mosquitto)', () => {
  let dir: string;
  const brokers: Broker[] = [];
  const sources: MqttSource[] = [];
  const publishers: MqttClient[] = [];

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'ta-mqtt-'));
  });
  afterEach(async () => {
    for (const s of sources.splice(0)) await s.stop();
    for (const p of publishers.splice(0)) await p.endAsync(true);
    for (const b of brokers.splice(0)) await b.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  async function broker(opts: ConstructorParameters<typeof Broker>[2] = {}, port?: number): Promise<Broker> {
    const b = new Broker(dir, port ?? (await freePort()), opts);
    brokers.push(b);
    await b.start();
    return b;
  }

  function source(url: string, extra: Record<string, unknown> = {}) {
    const rec = recorder();
    const cfg = mqttSourceSchema.parse({ type: 'mqtt', url, topics: ['fleet/+/telemetry'], resource_from_topic: 2, client_id: 'agent-under-test', reconnect_initial_s: 0.1, reconnect_max_s: 0.5, ...extra });
    const s = new MqttSource(cfg, rec.ctx);
    sources.push(s);
    return { s, rec };
  }

  async function publisher(url: string, opts: Record<string, unknown> = {}): Promise<MqttClient> {
    const p = mqttConnect(url, { clientId: `publisher-${publishers.length}`, reconnectPeriod: 100, ...opts });
    publishers.push(p);
    await new Promise<void>((resolve, reject) => {
      p.once('connect', () => resolve());
      p.once('error', reject);
    });
    return p;
  }

  /** Each message is one reading whose odometer is its number, so what arrived can be told apart. */
  const publishSeq = (p: MqttClient, trailer: string, n: number) => p.publishAsync(`fleet/${trailer}/telemetry`, JSON.stringify({ temperature: -18, odometer: n }), { qos: 1 });
  const seqs = (rec: ReturnType<typeof recorder>) => new Set(rec.readings.map((r) => r.odometer));

  it('subscribes with wildcards, takes readings from each trailer, and says it is connected', async () => {
    const b = await broker();
    const { s, rec } = source(b.url);
    await s.start();
    await waitFor(() => s.health().healthy, 10_000, 'connected');
    expect(s.health().detail).toBe(`connected to mqtt://127.0.0.1:${b.port} as agent-under-test, subscribed to fleet/+/telemetry`);
    const p = await publisher(b.url);
    for (const t of ['TRAILER-1', 'TRAILER-2', 'TRAILER-3']) await publishSeq(p, t, Number(t.slice(-1)));
    await p.publishAsync('fleet/TRAILER-4/telemetry', 'not json', { qos: 1 });
    await p.publishAsync('other/TRAILER-5/telemetry', JSON.stringify({ temperature: 1 }), { qos: 1 });
    await waitFor(() => rec.readings.length === 3 && rec.rejects.length === 1, 10_000, 'three readings and one refused');
    expect(rec.readings.map((r) => r.resourceId).sort()).toEqual(['TRAILER-1', 'TRAILER-2', 'TRAILER-3']);
    expect(rec.rejects[0]).toBe('topic fleet/TRAILER-4/telemetry: not JSON: "not json"');
    expect(s.health()).toMatchObject({ healthy: true, readings: 3, rejected: 1, counters: { messages: 4, notJson: 1, connects: 1 } });
  });

  it('loses no QoS 1 message when the broker restarts mid-stream', async () => {
    const b = await broker();
    const { s, rec } = source(b.url);
    await s.start();
    await waitFor(() => s.health().healthy, 10_000, 'connected');
    const p = await publisher(b.url, { clean: false });
    const sent: Array<Promise<unknown>> = [];
    for (let i = 1; i <= 100; i++) {
      sent.push(publishSeq(p, 'TRAILER-1', i));
      if (i === 50) {
        // Published while the agent was connected, not all of it delivered yet: the broker
        // keeps the agent's session and its queue across the restart, the publisher resends
        // what the broker had not acknowledged.
        await b.stop();
        await b.start();
      }
    }
    await Promise.all(sent);
    await waitFor(() => seqs(rec).size === 100, 20_000, 'all 100 messages');
    expect([...seqs(rec)].sort((x, y) => x! - y!)).toEqual(Array.from({ length: 100 }, (_, i) => i + 1));
    expect(s.health().counters.connects).toBeGreaterThanOrEqual(2);
  });

  it('loses no QoS 1 message when the agent restarts while a gateway publishes (persistent session)', async () => {
    const b = await broker();
    const first = source(b.url);
    await first.s.start();
    await waitFor(() => first.s.health().healthy, 10_000, 'connected');
    const p = await publisher(b.url);
    let second: ReturnType<typeof source> | undefined;
    for (let i = 1; i <= 100; i++) {
      await publishSeq(p, 'TRAILER-2', i);
      // Stopped after 30, started again (same client id) after 70: 31-70 wait at the broker.
      if (i === 30) await first.s.stop();
      if (i === 70) {
        second = source(b.url);
        await second.s.start();
      }
      await new Promise((r) => setTimeout(r, 2));
    }
    const all = () => new Set([...seqs(first.rec), ...seqs(second!.rec)]);
    await waitFor(() => all().size >= 100, 10_000, 'all 100 messages between the two runs');
    expect([...all()].sort((x, y) => x! - y!)).toEqual(Array.from({ length: 100 }, (_, i) => i + 1));
    // And none twice: what came while the first was stopping was not acknowledged, so it went to the second only.
    expect([...seqs(first.rec)].filter((n) => seqs(second!.rec).has(n))).toEqual([]);
    // The messages published while it was stopped came to the second run.
    expect([...seqs(second!.rec)]).toEqual(expect.arrayContaining([31, 50, 70]));
  });

  it('keeps retrying a broker that is not there, with backoff, and connects when it comes', async () => {
    const port = await freePort();
    const { s, rec } = source(`mqtt://127.0.0.1:${port}`);
    await s.start();
    await waitFor(() => s.health().counters.connectFailures >= 3, 10_000, 'three failed attempts');
    expect(s.health()).toMatchObject({ healthy: false });
    expect(s.health().detail).toMatch(new RegExp(`^not connected to mqtt://127.0.0.1:${port}: ECONNREFUSED .*attempts; retrying\\)$`));
    expect(rec.logs.filter((l) => l.level >= 30 && /MQTT broker at/.test(l.msg)).length).toBeLessThanOrEqual(2);
    await broker({}, port);
    await waitFor(() => s.health().healthy, 10_000, 'connected once the broker is up');
  });

  it('logs in with a password file, never logs the password, and says when the broker refuses it', async () => {
    const b = await broker({ users: { gateway: 'pa55-word-depot' } });
    const good = join(dir, 'pw');
    writeFileSync(good, 'pa55-word-depot\n', { mode: 0o600 });
    const bad = join(dir, 'bad');
    writeFileSync(bad, 'wrong-password\n', { mode: 0o600 });
    const refused = source(b.url, { username: 'gateway', password_file: bad, client_id: 'refused' });
    await refused.s.start();
    await waitFor(() => refused.s.health().counters.connectFailures >= 2, 10_000, 'refused twice');
    expect(refused.s.health().detail).toMatch(/^not connected to .*: Connection refused: Not authorized/);
    const { s, rec } = source(b.url, { username: 'gateway', password_file: good });
    await s.start();
    await waitFor(() => s.health().healthy, 10_000, 'connected with the password');
    const p = await publisher(b.url, { username: 'gateway', password: 'pa55-word-depot' });
    await publishSeq(p, 'TRAILER-3', 1);
    await waitFor(() => rec.readings.length === 1, 10_000, 'a reading');
    const logs = JSON.stringify([...rec.logs, ...refused.rec.logs]);
    expect(logs).not.toContain('pa55-word-depot');
    expect(JSON.stringify([s.health(), refused.s.health()])).not.toContain('pa55-word-depot');
  });

  it('connects over TLS to a broker whose certificate a private CA signed (ca_file)', async () => {
    const pki = makePki(dir);
    const b = await broker({ tls: { cert: pki.cert, key: pki.key } });
    const untrusted = source(b.url, { client_id: 'untrusted' });
    await untrusted.s.start();
    await waitFor(() => untrusted.s.health().counters.connectFailures >= 1, 10_000, 'a refused certificate');
    expect(untrusted.s.health().detail).toMatch(/self[- ]signed|unable to verify|issuer/i);
    const { s, rec } = source(b.url, { ca_file: pki.caFile });
    await s.start();
    await waitFor(() => s.health().healthy, 10_000, 'connected over TLS');
    const p = await publisher(b.url, { ca: readFileSync(pki.caFile) });
    await publishSeq(p, 'TRAILER-4', 1);
    await waitFor(() => rec.readings.length === 1, 10_000, 'a reading over TLS');
  });

  it('speaks MQTT over WebSocket (ws://)', async () => {
    const b = await broker();
    // Debian's mosquitto has no WebSocket listener: a bridge from WebSocket to its TCP port,
    // with the ws package MQTT.js itself uses for ws://.
    const { WebSocketServer, createWebSocketStream } = await import('ws');
    const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
    await new Promise<void>((r) => wss.once('listening', () => r()));
    wss.on('connection', (socket) => {
      const ws = createWebSocketStream(socket);
      const tcp = tcpConnect(b.port, '127.0.0.1');
      ws.pipe(tcp).pipe(ws);
      const end = () => {
        ws.destroy();
        tcp.destroy();
      };
      ws.on('error', end).on('close', end);
      tcp.on('error', end).on('close', end);
    });
    try {
      const url = `ws://127.0.0.1:${(wss.address() as AddressInfo).port}/mqtt`;
      const { s, rec } = source(url);
      await s.start();
      await waitFor(() => s.health().healthy, 10_000, 'connected over WebSocket');
      expect(s.health().detail).toBe(`connected to ${url} as agent-under-test, subscribed to fleet/+/telemetry`);
      const p = await publisher(b.url);
      await publishSeq(p, 'TRAILER-9', 1);
      await waitFor(() => rec.readings.length === 1, 10_000, 'a reading over WebSocket');
      await s.stop();
    } finally {
      for (const c of wss.clients) c.terminate();
      await new Promise((r) => wss.close(r));
    }
  });

  it('keeps reading after hostile payloads (MQTT 3.1.1: too large is dropped here)', async () => {
    const b = await broker();
    const { s, rec } = source(b.url, { max_message_bytes: 20_000, protocol_version: 4 });
    await s.start();
    await waitFor(() => s.health().healthy, 10_000, 'connected');
    const p = await publisher(b.url);
    const t = 'fleet/TRAILER-5/telemetry';
    await p.publishAsync(t, Buffer.alloc(100_000, 0x41), { qos: 1 });
    await p.publishAsync(t, Buffer.from([0, 1, 2, 0xff]), { qos: 1 });
    await p.publishAsync(t, '{"__proto__": {"polluted": 1}, "temperature": "hot"}', { qos: 1 });
    await p.publishAsync(t, `${'['.repeat(400)}${']'.repeat(400)}`, { qos: 1 });
    // Nested deep inside a field, under max_message_bytes: this one took the daemon down.
    await p.publishAsync(t, `{"latitude": ${'['.repeat(5000)}${']'.repeat(5000)}, "longitude": 1}`, { qos: 1 });
    await p.publishAsync(t, JSON.stringify({ temperature: 999 }), { qos: 1 });
    await publishSeq(p, 'TRAILER-5', 7);
    await waitFor(() => rec.readings.length === 1 && rec.rejects.length === 6, 10_000, 'one reading after six bad messages');
    expect(rec.readings[0]).toMatchObject({ resourceId: 'TRAILER-5', odometer: 7 });
    expect(s.health().counters).toMatchObject({ messages: 7, tooLarge: 1, notJson: 1, invalid: 3 });
    // The range check is admission's, as for every source.
    expect(rec.rejects).toContain('topic fleet/TRAILER-5/telemetry: temperature: out of range (999)');
    expect(rec.rejects).toContain('topic fleet/TRAILER-5/telemetry: latitude: expected a number, got an array');
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(s.health().healthy).toBe(true);
  });

  it('with MQTT 5 the broker never sends a message over max_message_bytes: it is not even read', async () => {
    const b = await broker();
    const { s, rec } = source(b.url, { max_message_bytes: 1024 });
    await s.start();
    await waitFor(() => s.health().healthy, 10_000, 'connected');
    const p = await publisher(b.url);
    await p.publishAsync('fleet/TRAILER-5/telemetry', Buffer.alloc(200_000, 0x41), { qos: 1 });
    await publishSeq(p, 'TRAILER-5', 1);
    await waitFor(() => rec.readings.length === 1, 10_000, 'the small message');
    expect(s.health().counters).toMatchObject({ messages: 1, tooLarge: 0 });
  });

  it('ignores topics a kept session still has but the config no longer names', async () => {
    const b = await broker();
    const before = source(b.url, { topics: ['fleet/+/telemetry', 'yard/+/telemetry'] });
    await before.s.start();
    await waitFor(() => before.s.health().healthy, 10_000, 'connected');
    await before.s.stop();
    const { s, rec } = source(b.url);
    await s.start();
    await waitFor(() => s.health().healthy, 10_000, 'connected again, the same session');
    const p = await publisher(b.url);
    await p.publishAsync('yard/OTHER-1/telemetry', JSON.stringify({ temperature: 1 }), { qos: 1 });
    await publishSeq(p, 'TRAILER-8', 1);
    await waitFor(() => rec.readings.length === 1, 10_000, 'the message on a configured topic');
    await new Promise((r) => setTimeout(r, 200));
    expect(rec.readings.map((r) => r.resourceId)).toEqual(['TRAILER-8']);
    expect(s.health().counters.otherTopic).toBe(1);
  });

  it('leaves out retained messages without a time of their own: an old value would pass for a new one', async () => {
    const b = await broker();
    const p = await publisher(b.url);
    // Retained: the last value published, sent again to every new subscription.
    await p.publishAsync('fleet/TRAILER-6/telemetry', JSON.stringify({ temperature: 5 }), { qos: 1, retain: true });
    await p.publishAsync('fleet/TRAILER-7/telemetry', JSON.stringify({ temperature: 6, time: new Date().toISOString() }), { qos: 1, retain: true });
    const { s, rec } = source(b.url, { client_id: 'new-session' });
    await s.start();
    await waitFor(() => s.health().counters.retainedWithoutTime === 1 && rec.readings.length === 1, 10_000, 'the two retained messages');
    await publishSeq(p, 'TRAILER-8', 1);
    await waitFor(() => rec.readings.length === 2, 10_000, 'the live message');
    expect(rec.readings.map((r) => r.resourceId)).toEqual(['TRAILER-7', 'TRAILER-8']);
  });

  it('stops at once while a connection attempt hangs', async () => {
    const sockets: Socket[] = [];
    // Reads what comes (the CONNECT) and never answers.
    const silent = createServer((sock) => {
      sockets.push(sock);
      sock.resume();
    });
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', () => r()));
    try {
      const { s } = source(`mqtt://127.0.0.1:${(silent.address() as AddressInfo).port}`);
      await s.start();
      await waitFor(() => sockets.length === 1, 5000, 'the connection');
      const closed = new Promise<void>((r) => sockets[0].once('close', () => r()));
      const t0 = performance.now();
      await s.stop();
      expect(performance.now() - t0).toBeLessThan(1000);
      await closed;
    } finally {
      for (const sock of sockets) sock.destroy();
      await new Promise((r) => silent.close(r));
    }
  });

  it('does not knock every second when the broker throws it out at once (another agent with its client id)', async () => {
    const b = await broker();
    const twins = [source(b.url, { client_id: 'twin', reconnect_initial_s: 0.2, reconnect_max_s: 2 }), source(b.url, { client_id: 'twin', reconnect_initial_s: 0.2, reconnect_max_s: 2 })];
    for (const t of twins) await t.s.start();
    await new Promise((r) => setTimeout(r, 5000));
    // Each takes the session from the other. With the backoff started over at each connect,
    // that was a connect every 0.2 s each (some 40 in 5 s); growing, at most about 10.
    const connects = twins.reduce((n, t) => n + t.s.health().counters.connects, 0);
    expect(connects).toBeGreaterThanOrEqual(2);
    expect(connects).toBeLessThanOrEqual(12);
  });
});
