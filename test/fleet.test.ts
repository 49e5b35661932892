/**
 * The fleet link against a real mosquitto (password file and the ACL of docs/fleet.md), a
 * real daemon process and the real sandbox: dispatch assigns a load over MQTT and its traces
 * and detected milestones reach the service; a command id is applied once, across a broker
 * redelivery and a restart; a command sent while the agent is away is applied when it is
 * back; bad commands are answered with an error; the Last Will; the ACL; TLS with a client
 * certificate.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { connect, type IClientOptions, type MqttClient } from 'mqtt';
import { afterEach, describe, expect, it } from 'vitest';
import { formatTime } from '../src/geo/timezone.js';
import { agentConfig, daemonFixture, fakeClockEnv, findLibfaketime, runCli, startDaemon, waitFor, writeFile } from './helpers.js';
import { nmeaFrom } from './nmea-lines.js';
import { FLEET_ACL } from './fleet-acl.js';
import { makePki } from './pki.js';
import { Broker, NO_MOSQUITTO } from './sources/mosquitto.js';
import { freePort } from './sources/support.js';

const USERS = { dispatch: 'dispatch-pw', 'truck-a': 'a-pw', 'truck-b': 'b-pw' };

/** A resource parked at the pick-up: a fix every 200 ms. */
const PARKED = `let t;
export function createSource(ctx) {
  return {
    start() { t = setInterval(() => ctx.emit({ resourceId: 'TRUCK-A', timeMs: Date.now(), lat: 41.8781, lon: -87.6298, speed: 0 }), 200); },
    stop() { clearInterval(t); },
  };
}
`;

interface Reply {
  commandId: string | null;
  ok: boolean;
  status: number;
  message: string;
}

/** `ms` as a local time at a whole-hour UTC offset: `2026-11-23T09:00:00-08:00`. */
const withOffset = (ms: number, hours: number) => `${new Date(ms + hours * 3_600_000).toISOString().slice(0, 19)}${hours < 0 ? '-' : '+'}${String(Math.abs(hours)).padStart(2, '0')}:00`;

describe.skipIf(NO_MOSQUITTO)('the fleet link (real mosquitto with ACLs, real daemon, real sandbox)', () => {
  let broker: Broker;
  const clients: MqttClient[] = [];
  const fx = daemonFixture({ prefix: 'ta-fleet-', afterStop: () => broker?.stop() });
  // Before the daemon stops (vitest runs after-hooks last registered first).
  afterEach(() => {
    for (const c of clients.splice(0)) c.end(true);
  });

  async function startBroker(opts: ConstructorParameters<typeof Broker>[2] = { users: USERS, acl: FLEET_ACL }): Promise<Broker> {
    broker = new Broker(join(fx.tmp.dir, 'broker'), await freePort(), opts);
    await broker.start();
    return broker;
  }

  async function client(opts: IClientOptions, url = broker.url): Promise<MqttClient> {
    const c = connect(url, { protocolVersion: 5, reconnectPeriod: 0, ...opts });
    clients.push(c);
    await new Promise<void>((resolve, reject) => {
      c.once('connect', () => resolve());
      c.once('error', reject);
    });
    return c;
  }

  const dispatch = () => client({ username: 'dispatch', password: USERS.dispatch, clientId: `dispatch-${Math.random()}` });

  /** Everything published on `filter` from now on, as parsed JSON with its topic. */
  async function watch(c: MqttClient, filter: string): Promise<Array<{ topic: string; body: Record<string, unknown>; retain: boolean; correlation?: string }>> {
    const seen: Array<{ topic: string; body: Record<string, unknown>; retain: boolean; correlation?: string }> = [];
    c.on('message', (topic, payload, packet) => {
      if (topicMatch(filter, topic)) seen.push({ topic, body: JSON.parse(payload.toString()), retain: packet.retain, correlation: packet.properties?.correlationData?.toString() });
    });
    await c.subscribeAsync(filter, { qos: 1 });
    return seen;
  }

  async function send(c: MqttClient, device: string, name: string, body: unknown): Promise<Reply> {
    const id = typeof body === 'string' ? (/"commandId":\s*"([^"]+)"/.exec(body)?.[1] ?? 'invalid') : ((body as { commandId?: string }).commandId ?? 'invalid');
    const replies = await watch(c, `fleet/${device}/reply/${id}`);
    const before = replies.length;
    await c.publishAsync(`fleet/${device}/cmd/${name}`, typeof body === 'string' ? body : JSON.stringify(body), { qos: 1 });
    return (await waitFor(() => replies[before], 15_000, `the reply to ${id}`)).body as unknown as Reply;
  }

  /** `milestones`: more lines for the [milestones] table. */
  function fleetConfig(extra = '', fleet = '', milestones = ''): string {
    writeFile(fx.tmp.dir, 'fleet-password', `${USERS['truck-a']}\n`, 0o600);
    return agentConfig(
      fx.tmp.dir,
      fx.sandbox.url,
      `[milestones]
dwell_s = 0
min_fixes = 2
${milestones}
[fleet]
url = "${broker.url}"
username = "truck-a"
password_file = "${join(fx.tmp.dir, 'fleet-password')}"
keepalive_s = 5
status_interval_s = 5
${fleet}
${extra}`,
      { deviceId: 'truck-a', traces: '*/2 * * * * *', sampling: 0 },
    );
  }

  const run = (cfg: string) => {
    fx.daemon = startDaemon(['--config', cfg]);
    return waitFor(() => fx.daemon!.output().includes('connected to the fleet broker'), 15_000, 'the daemon on the fleet broker');
  };

  /** The broker, the sandbox and a daemon on the link with `fleetConfig(...)`; its config file. */
  async function linked(...args: Parameters<typeof fleetConfig>): Promise<string> {
    await startBroker();
    await fx.sandbox.start();
    const cfg = fleetConfig(...args);
    await run(cfg);
    return cfg;
  }

  const buffer = () => join(fx.tmp.dir, 'buffer.db');
  const countOf = (sql: string) => {
    const db = new Database(buffer(), { readonly: true });
    try {
      return (db.prepare(sql).get() as { n: number }).n;
    } finally {
      db.close();
    }
  };

  it('on a device whose clock is not set, a load and a milestone from dispatch are stamped on GNSS time, not 12 h early', async (ctx) => {
    const libfaketime = findLibfaketime();
    if (!libfaketime) {
      console.log('skipped: libfaketime not found under /usr/lib/*/faketime/ (apt-get install faketime)');
      ctx.skip();
    }
    await startBroker();
    await fx.sandbox.start();
    // The receiver's fixes carry the true time; the daemon's system clock is 12 h behind and
    // the kernel says so (clock.synchronised = "no"); the nmea source reads them from a file.
    const { text } = nmeaFrom(Math.floor(Date.now() / 1000) * 1000 - 6000, 6);
    const fixes = writeFile(fx.tmp.dir, 'fixes.nmea', text);
    const cfg = fleetConfig(`[clock]\nsynchronised = "no"\n[[sources]]\ntype = "nmea"\nresource_id = "TRUCK-A"\ndevice = "${fixes}"\n`);
    fx.daemon = startDaemon(['--config', cfg], fakeClockEnv(libfaketime!, writeFile(fx.tmp.dir, 'faketime', '-12h\n')));
    await waitFor(() => fx.daemon!.output().includes('connected to the fleet broker'), 15_000, 'the daemon on the fleet broker');
    await waitFor(() => fx.daemon!.output().includes('GNSS time is +1'), 15_000, 'the agent on GNSS time');
    const d = await dispatch();
    expect(await send(d, 'truck-a', 'load-start', { commandId: 'g-1', loadNumber: 'L-G', resourceId: 'TRUCK-A' })).toMatchObject({ ok: true });
    expect(await send(d, 'truck-a', 'milestone', { commandId: 'g-2', loadNumber: 'L-G', eventCode: 'SD', reasonCode: 'AI' })).toMatchObject({ ok: true });
    const m = await waitFor(() => fx.sandbox.milestones.find((x) => x.body.loadNumber === 'L-G'), 15_000, 'the milestone at the sandbox');
    expect(Math.abs(Date.parse(m.body.time.dateTime) - Date.now())).toBeLessThan(60_000);
    const db = new Database(buffer(), { readonly: true });
    try {
      const load = db.prepare("SELECT started_ms AS startedMs FROM loads WHERE load_number = 'L-G'").get() as { startedMs: number };
      expect(Math.abs(load.startedMs - Date.now())).toBeLessThan(60_000);
    } finally {
      db.close();
    }
  });

  it('a load assigned over MQTT gets its traces and its detected arrival delivered, and status tells the desk', async () => {
    await startBroker();
    await fx.sandbox.start();
    const source = writeFile(fx.tmp.dir, 'parked.mjs', PARKED);
    await run(fleetConfig(`[[sources]]\ntype = "module"\nname = "parked"\npath = "${source}"\n`));
    const d = await dispatch();
    const status = await watch(d, 'fleet/truck-a/status');
    await waitFor(() => status.find((s) => s.body.online === true), 10_000, 'the retained status');
    const reply = await send(d, 'truck-a', 'load-start', {
      commandId: 'c-1',
      loadNumber: 'L-100',
      resourceId: 'TRUCK-A',
      stops: [{ sequence: 1, type: 'pickup', latitude: 41.8781, longitude: -87.6298, radiusM: 300 }],
    });
    expect(reply).toEqual({ commandId: 'c-1', ok: true, status: 0, message: 'load L-100 started on TRUCK-A (Truck) with 1 stop(s)' });
    await waitFor(() => fx.sandbox.traces.some((t) => t.body.loadNumber === 'L-100'), 20_000, 'traces of L-100 at the sandbox');
    await waitFor(() => fx.sandbox.milestones.some((m) => m.body.loadNumber === 'L-100' && m.body.eventCode === 'X3'), 20_000, 'the detected arrival');
    // The status names the load, its backlog and the last fix with its place.
    const s = await waitFor(
      () => status.find((x) => (x.body.loads as Array<{ loadNumber: string }> | undefined)?.some((l) => l.loadNumber === 'L-100') && (x.body.lastFixes as unknown[]).length > 0),
      15_000,
      'a status with the load and its fix',
    );
    expect(s.retain).toBe(false); // live delivery to a subscriber; retained copies are checked below
    expect(s.body).toMatchObject({ online: true, deviceId: 'truck-a', state: expect.stringMatching(/^(OK|DEGRADED)$/), lastFixes: [{ resourceId: 'TRUCK-A', eventCity: 'Chicago', eventState: 'IL' }] });
    expect(JSON.stringify(status)).not.toContain(USERS['truck-a']);
    // A milestone by hand, as the CLI records one.
    const m = await send(d, 'truck-a', 'milestone', { commandId: 'c-2', loadNumber: 'L-100', eventCode: 'AF', stopsequenceNumber: 1 });
    expect(m).toMatchObject({ commandId: 'c-2', ok: true, status: 0 });
    await waitFor(() => fx.sandbox.milestones.some((x) => x.body.eventCode === 'AF'), 15_000, 'the AF milestone');
    // The last push and the service's answer to it.
    const answered = await waitFor(() => status.find((x) => (x.body.lastPush as { answer?: string } | undefined)?.answer && (x.body.lastPush as { at?: string }).at), 15_000, 'a status with the last answer');
    expect(answered.body.lastPush).toMatchObject({ at: expect.any(String), lastSuccessAt: expect.any(String), answer: expect.stringMatching(/^HTTP 20\d$/), answerAt: expect.any(String), error: null });
    // A late subscriber (the desk's dashboard starting) gets the retained status at once.
    const late = await dispatch();
    const retained = await watch(late, 'fleet/truck-a/status');
    await waitFor(() => retained[0], 5000, 'the retained status');
    expect(retained[0]).toMatchObject({ retain: true, body: { online: true } });
    const end = await send(d, 'truck-a', 'load-end', { commandId: 'c-3', loadNumber: 'L-100' });
    expect(end).toEqual({ commandId: 'c-3', ok: true, status: 0, message: 'load L-100 ended' });
    // A clean stop says offline itself.
    expect(await fx.daemon!.stop('SIGTERM')).toEqual({ code: 0, signal: null });
    await waitFor(() => status.find((x) => x.body.online === false), 5000, 'online: false');
    expect(status.find((x) => x.body.online === false)!.body.reason).toBe('stopped');
  });

  it('a command delivered twice, and again after a restart, is applied once and answered with its first answer', async () => {
    const cfg = await linked();
    const d = await dispatch();
    const cmd = { commandId: 'sd-1', loadNumber: 'L-7', eventCode: 'SD', reasonCode: 'AO', time: new Date(Math.floor(Date.now() / 1000) * 1000 - 3_600_000).toISOString() };
    // The operator's CLI, as dispatch would: its exit status is the answer's.
    const file = writeFile(fx.tmp.dir, 'load.json', JSON.stringify({ commandId: 'ls-1', loadNumber: 'L-7', resourceId: 'T7' }));
    const pw = writeFile(fx.tmp.dir, 'dispatch-pw', `${USERS.dispatch}\n`);
    const sent = await runCli(['fleet', 'send', '--url', broker.url, '--username', 'dispatch', '--password-file', pw, '--device', 'truck-a', 'load-start', '--file', file]);
    expect(sent.code, sent.stderr).toBe(0);
    expect(JSON.parse(sent.stdout)).toEqual({ commandId: 'ls-1', ok: true, status: 0, message: 'load L-7 started on T7 (Truck) with 0 stop(s)' });
    const refused = await runCli([
      'fleet',
      'send',
      '--url',
      broker.url,
      '--username',
      'dispatch',
      '--password-file',
      pw,
      '--device',
      'truck-a',
      'milestone',
      '--json',
      '{"loadNumber": "L-7", "eventCode": "ZZ"}',
    ]);
    expect(refused.code).toBe(65);
    expect(JSON.parse(refused.stdout).message).toContain('eventCode ZZ is not in codes.events');
    // SD is repeatable: only the command id keeps a second one out.
    const first = await send(d, 'truck-a', 'milestone', cmd);
    expect(first).toMatchObject({ ok: true, status: 0 });
    expect(await send(d, 'truck-a', 'milestone', cmd)).toEqual(first);
    expect(await send(d, 'truck-a', 'load-start', { commandId: 'ls-1', loadNumber: 'L-7', resourceId: 'T7' })).toEqual({
      commandId: 'ls-1',
      ok: true,
      status: 0,
      message: 'load L-7 started on T7 (Truck) with 0 stop(s)',
    });
    await fx.daemon!.stop('SIGTERM');
    await run(cfg);
    expect(await send(d, 'truck-a', 'milestone', cmd)).toEqual(first);
    expect(countOf("SELECT count(*) AS n FROM milestones WHERE code = 'SD'")).toBe(1);
    expect(countOf('SELECT count(*) AS n FROM loads')).toBe(1);
    expect(fx.daemon!.output()).toContain('fleet command seen before');
  });

  it('old command ids are forgotten once the link has settled; a retained command, handed over at every connect, is answered again, never applied twice', async () => {
    const cfg = await linked();
    const d = await dispatch();
    expect(await send(d, 'truck-a', 'load-start', { commandId: 'pl-1', loadNumber: 'L-8', resourceId: 'T8' })).toMatchObject({ ok: true });
    // Dispatch's mistake: a repeatable milestone published retained. The broker hands it over
    // at every subscription; only its id keeps a second SD out.
    const cmd = { commandId: 'ret-sd', loadNumber: 'L-8', eventCode: 'SD', reasonCode: 'AO', time: new Date(Math.floor(Date.now() / 1000) * 1000 - 3_600_000).toISOString() };
    const replies = await watch(d, 'fleet/truck-a/reply/ret-sd');
    await d.publishAsync('fleet/truck-a/cmd/milestone', JSON.stringify(cmd), { qos: 1, retain: true });
    const first = (await waitFor(() => replies[0], 15_000, 'the first answer')).body;
    expect(first).toMatchObject({ ok: true, status: 0 });
    expect(await send(d, 'truck-a', 'status', { commandId: 'fresh-1' })).toMatchObject({ ok: true });
    await fx.daemon!.stop('SIGTERM');
    // pl-1 and ret-sd last received 40 days ago, as far as the buffer knows; fresh-1 just now.
    const db = new Database(buffer());
    db.prepare("UPDATE fleet_commands SET received_ms = received_ms - ? WHERE command_id IN ('pl-1', 'ret-sd')").run(40 * 86_400_000);
    db.close();
    await run(cfg);
    expect((await waitFor(() => replies[1], 15_000, 'the answer to the retained command at the new subscription')).body).toEqual(first);
    // Once the subscription has settled: pl-1 forgotten; ret-sd, received again just now, kept.
    await waitFor(() => countOf("SELECT count(*) AS n FROM fleet_commands WHERE command_id = 'pl-1'") === 0, 20_000, 'pl-1 forgotten');
    expect(countOf("SELECT count(*) AS n FROM fleet_commands WHERE command_id IN ('ret-sd', 'fresh-1')")).toBe(2);
    expect(countOf("SELECT count(*) AS n FROM milestones WHERE code = 'SD'")).toBe(1);
    // Logged after the delete commits: the line may reach this process a moment later.
    await waitFor(() => fx.daemon!.output().includes('fleet command ids last received more than 30 days ago forgotten'), 5000, 'the log line of the ids forgotten');
  });

  it('a command sent while the agent is away is applied when it is back (persistent session)', async () => {
    const cfg = await linked();
    await fx.daemon!.stop('SIGTERM');
    const d = await dispatch();
    const replies = await watch(d, 'fleet/truck-a/reply/away-1');
    await d.publishAsync('fleet/truck-a/cmd/load-start', JSON.stringify({ commandId: 'away-1', loadNumber: 'L-AWAY', resourceId: 'T1', resourceType: 'trailer' }), { qos: 1 });
    expect(replies).toEqual([]);
    await run(cfg);
    const r = await waitFor(() => replies[0], 15_000, 'the reply once the agent is back');
    expect(r.body).toEqual({ commandId: 'away-1', ok: true, status: 0, message: 'load L-AWAY started on T1 (Trailer) with 0 stop(s)' });
    expect(countOf("SELECT count(*) AS n FROM loads WHERE load_number = 'L-AWAY'")).toBe(1);
  });

  it('answers a malformed, oversized, invalid or unknown command with an error and keeps running', async () => {
    await linked('', 'max_command_bytes = 2048');
    const d = await dispatch();
    expect(await send(d, 'truck-a', 'load-start', '{"commandId": "bad-1", "loadNumber": ')).toMatchObject({ commandId: 'bad-1', ok: false, status: 64, message: expect.stringContaining('not JSON') });
    const big = JSON.stringify({ commandId: 'big-1', loadNumber: 'L-1', resourceId: 'T1', stops: [{ sequence: 1, type: 'pickup', name: 'x'.repeat(5000) }] });
    expect(await send(d, 'truck-a', 'load-start', big)).toMatchObject({ commandId: 'big-1', ok: false, status: 64, message: expect.stringContaining('larger than fleet.max_command_bytes (2048)') });
    expect(await send(d, 'truck-a', 'reboot', { commandId: 'rb-1' })).toMatchObject({ commandId: 'rb-1', ok: false, status: 64, message: expect.stringContaining('unknown command "reboot"') });
    expect(await send(d, 'truck-a', 'load-start', { commandId: 'f-1', loadNumber: 'L-1' })).toMatchObject({ ok: false, status: 64, message: expect.stringContaining('resourceId') });
    // Refused as the CLI refuses it: the load number pattern, an unknown code, an unknown load.
    expect(await send(d, 'truck-a', 'load-start', { commandId: 'p-1', loadNumber: 'L 1/2', resourceId: 'T1' })).toMatchObject({
      ok: false,
      status: 65,
      message: expect.stringContaining('api.load_number_pattern'),
    });
    expect(await send(d, 'truck-a', 'milestone', { commandId: 'm-1', loadNumber: 'NOPE', eventCode: 'X3' })).toMatchObject({ ok: false, status: 65, message: expect.stringContaining('no such load') });
    // No usable commandId: answered on reply/invalid.
    const invalid = await watch(d, 'fleet/truck-a/reply/invalid');
    await d.publishAsync('fleet/truck-a/cmd/status', '[1, 2]', { qos: 1 });
    expect((await waitFor(() => invalid[0], 10_000, 'the answer on reply/invalid')).body).toMatchObject({ commandId: null, ok: false, status: 64 });
    // MQTT 5: the answer also goes to the response topic (one the device may write), with the correlation data.
    const rt = await watch(d, 'fleet/truck-a/reply/desk-7');
    await d.publishAsync('fleet/truck-a/cmd/status', JSON.stringify({ commandId: 's-1' }), { qos: 1, properties: { responseTopic: 'fleet/truck-a/reply/desk-7', correlationData: Buffer.from('corr-9') } });
    await waitFor(() => rt[0], 10_000, 'the answer on the response topic');
    expect(rt[0]).toMatchObject({ body: { commandId: 's-1', ok: true, status: 0, message: 'status published' }, correlation: 'corr-9' });
    // Still running, still taking commands.
    expect(await send(d, 'truck-a', 'load-start', { commandId: 'ok-1', loadNumber: 'L-1', resourceId: 'T1' })).toMatchObject({ ok: true });
    expect(fx.daemon!.child.exitCode).toBeNull();
    expect(fx.daemon!.output()).toContain('fleet command refused');
  });

  it("a refused command's answer names the command's JSON fields, never the CLI's options; the CLI keeps its words", async () => {
    await linked();
    const d = await dispatch();
    // Stop 1 is placed (its zone reads a local time); the truck has no fix.
    const stops = [{ sequence: 1, type: 'pickup', latitude: 41.8781, longitude: -87.6298 }];
    expect(await send(d, 'truck-a', 'load-start', { commandId: 'w-load', loadNumber: 'L-W', resourceId: 'TRUCK-W', stops })).toMatchObject({ ok: true });
    expect(await send(d, 'truck-a', 'milestone', { commandId: 'w-x3', loadNumber: 'L-W', eventCode: 'X3', stopsequenceNumber: 1 })).toMatchObject({ ok: true });
    const iso = (ms: number) => new Date(ms).toISOString().replace(/\.\d+Z$/, 'Z');
    const now = Date.now();
    const day = 86_400_000;
    // Every refusal a milestone can get whose CLI message names an option (--resource, --reason,
    // --code, --force, --time, --city, --lat/--lon, --stop), and what dispatch reads instead.
    const cases: Array<[Record<string, unknown>, string | RegExp]> = [
      [{ loadNumber: 'NOPE' }, 'load NOPE: no such load on this device (start it with a load-start command)'],
      [{ eventCode: 'NS' }, /^eventCode NS is not in codes\.events \(NS is a reason code: give it as reasonCode\); the list holds .*If the service accepts it, add it to codes\.events in the device's config$/],
      [{ reasonCode: 'X3' }, 'reasonCode X3 is not in codes.reasons (X3 is an event code: give it as eventCode);'],
      [
        { eventState: 'TX', time: '2026-11-20T08:15:00' },
        "no eventCity, and TX spans more than one time zone (America/Chicago, America/Denver): the milestone's zone cannot be told. Give time with its UTC offset (such as 2026-11-20T08:15:00-06:00), or an eventCity the gazetteer knows",
      ],
      [{ time: 'yesterday' }, 'time: expected an ISO 8601 time such as 2026-11-23T10:00:00'],
      [{ stopsequenceNumber: 1, time: '2026-02-30T10:00:00' }, 'time: "2026-02-30T10:00:00" is not a date and time that exists on a calendar'],
      [
        { time: '2026-11-20T08:15:00' },
        /^time 2026-11-20T08:15:00 has no UTC offset, and nothing tells the zone it was meant in \(no stopsequenceNumber; no fix of TRUCK-W is in the buffer yet; no eventCity and eventState\): give the offset/,
      ],
      [{ time: '2020-01-01T00:00:00Z' }, 'time 2020-01-01T00:00:00Z is before 2025-01-01, older than any load this agent carried: check the year'],
      [{ eventCode: 'AA', stopsequenceNumber: 1, time: iso(now + 800 * day) }, `time ${iso(now + 800 * day)} is more than a year ahead of this device's clock: no appointment is that far off; check the year`],
      [
        { time: iso(now - 60 * day) },
        `time ${iso(now - 60 * day)} is 60 days before this device's clock, more than sources_time.max_past_days (30): check the date; the fleet link records no milestone older than that`,
      ],
      [
        { time: iso(now + day) },
        /^time \S+ is \d+ s ahead of this device's clock \(sources_time\.max_future_s = 300\): a milestone records what happened\. Only appointment codes \(codes\.appointments: AA, AB\) may lie in the future$/,
      ],
      [{ eventCode: 'X3', stopsequenceNumber: 1 }, /^load L-W already has X3 for stop 1: milestone \d+ .*\. One milestone per load, code and stop: this one was not recorded$/],
    ];
    for (const [i, [fields, words]] of cases.entries()) {
      const reply = await send(d, 'truck-a', 'milestone', { commandId: `w-${i}`, loadNumber: 'L-W', eventCode: 'X1', ...fields });
      // Soft: one run says which of them fail.
      expect.soft(reply, JSON.stringify(fields)).toMatchObject({ ok: false, status: 65 });
      expect.soft(reply.message, JSON.stringify(fields)).not.toMatch(/--[a-z]/);
      if (typeof words === 'string') expect.soft(reply.message, JSON.stringify(fields)).toContain(words);
      else expect.soft(reply.message, JSON.stringify(fields)).toMatch(words);
    }
    // The same refusals on the command line keep the CLI's words.
    const cfg = join(fx.tmp.dir, 'agent.toml');
    const cli = await runCli(['milestone', '--load', 'L-W', '--code', 'X3', '--stop', '1', '--config', cfg]);
    expect(cli.stderr).toContain('One milestone per load, code and stop; to record another anyway, add --force');
    const old = await runCli(['milestone', '--load', 'L-W', '--code', 'X1', '--time', iso(now - 60 * day), '--config', cfg]);
    expect(old.stderr).toContain('to record it anyway (a correction to an old load), add --force');
  });

  it("a milestone recorded with a warning is answered in dispatch's words: the command's JSON fields, never the CLI's options", async () => {
    await startBroker();
    await fx.sandbox.start();
    // TRUCK-H was in Querétaro (America/Mexico_City) 20 minutes ago, a fix every 10 s for 5
    // minutes, and is in Hermosillo (America/Hermosillo) now; TRUCK-W has no fix at all.
    const base = Math.floor(Date.now() / 1000) * 1000 - 20 * 60_000;
    const source = writeFile(fx.tmp.dir, 'moved.mjs', MOVED(base));
    await run(fleetConfig(`[[sources]]\ntype = "module"\nname = "moved"\npath = "${source}"\n`, '', 'max_fix_age_s = 300'));
    const d = await dispatch();
    // Stops 1 and 2 are placed in Chicago; stop 3 has no place.
    const stops = [
      { sequence: 1, type: 'pickup', latitude: 41.8781, longitude: -87.6298 },
      { sequence: 2, type: 'delivery', latitude: 41.85, longitude: -87.65 },
      { sequence: 3, type: 'delivery' },
    ];
    expect(await send(d, 'truck-a', 'load-start', { commandId: 'mw-load', loadNumber: 'L-MW', resourceId: 'TRUCK-W', stops })).toMatchObject({ ok: true });
    const from = new Date(base - 60_000).toISOString();
    expect(await send(d, 'truck-a', 'load-start', { commandId: 'mw-load-h', loadNumber: 'L-MH', resourceId: 'TRUCK-H', from })).toMatchObject({ ok: true });
    await waitFor(() => countOf("SELECT count(*) AS n FROM readings WHERE resource_id = 'TRUCK-H' AND lon < -110") > 0, 15_000, 'a fix of TRUCK-H in Hermosillo');
    const { skipped, repeated } = chicagoClockChanges(Date.now());
    // 5 s from a fix in Querétaro, typed as the clock of the last fix (Hermosillo) reads it.
    const typed = formatTime(new Date(base + 125_000), 'America/Hermosillo', 'local').dateTime.slice(0, 19);
    // Every warning a milestone command can get (the --force ones cannot arise: the commands
    // have no force), with the CLI's words and dispatch's.
    const cases: Array<[Record<string, unknown>, string | RegExp]> = [
      [
        { eventCode: 'AA', stopsequenceNumber: 1, time: `${skipped}T02:30:00` },
        `warning: time ${skipped}T02:30:00 does not exist in America/Chicago (the clocks skip it): read as ${skipped}T03:30:00-05:00; give the offset if another time was meant`,
      ],
      [
        { eventCode: 'AB', stopsequenceNumber: 2, time: `${repeated}T01:30:00` },
        `warning: time ${repeated}T01:30:00 occurs twice in America/Chicago: read as the first, ${repeated}T01:30:00-05:00; give the offset (such as ${repeated}T01:30:00-06:00) if the second was meant`,
      ],
      [{ eventCode: 'X6', eventCity: 'Chicagoo', eventState: 'IL' }, 'warning: eventCity Chicagoo, eventState IL is not in the gazetteer: sent as typed, in the zone of IL (America/Chicago)'],
      [
        { eventCode: 'X3', stopsequenceNumber: 1, eventCity: 'Chicago' },
        'warning: eventCity Chicago cannot be looked up in the gazetteer without eventState: sent as typed, with the zone of stop 1 (America/Chicago)',
      ],
      [
        { eventCode: 'SD', reasonCode: 'AI' },
        /warning: no position for this milestone \(no fix of TRUCK-W is in the buffer yet; no eventCity and eventState; no stopsequenceNumber\): it is recorded in this device's zone \(\S+\) without eventCity and eventState; the agent fills them in from its newest fix when it sends it, if it has one by then$/,
      ],
      [
        { eventCode: 'X1', stopsequenceNumber: 3 },
        /warning: no position for this milestone \(no fix of TRUCK-W is in the buffer yet; no eventCity and eventState; stop 3 has no coordinates\): it is recorded in /,
      ],
      [
        { loadNumber: 'L-MH', eventCode: 'X1', time: typed },
        new RegExp(
          `warning: time ${typed} was read in the zone of the last fix of TRUCK-H, \\d+ s old \\(America/Hermosillo\\); TRUCK-H was in America/Mexico_City then, and the same instant is sent in that zone$`,
        ),
      ],
      // An hour ago, at offsets the place does not have then.
      [
        { eventCode: 'X2', stopsequenceNumber: 2, time: withOffset(Date.now() - 3_600_000, -8) },
        /warning: time \S+ has the offset -08:00, but the zone of stop 2 \(America\/Chicago\) is at -0[56]:00 then: sent as the same instant there, \S+; give -0[56]:00 \(\S+\) if \d\d:\d\d there was meant/,
      ],
      [
        { eventCode: 'AF', eventState: 'KS', time: withOffset(Date.now() - 3_600_000, 1) },
        /warning: time \S+ has the offset \+01:00, which no zone of KS has then \(America\/Chicago -0[56]:00, America\/Denver -0[67]:00\): sent at the offset typed; check it if a time in KS was meant/,
      ],
    ];
    for (const [i, [fields, words]] of cases.entries()) {
      const reply = await send(d, 'truck-a', 'milestone', { commandId: `mw-${i}`, loadNumber: 'L-MW', ...fields });
      expect.soft(reply, JSON.stringify(fields)).toMatchObject({ ok: true, status: 0 });
      expect.soft(reply.message, JSON.stringify(fields)).not.toMatch(/--[a-z]/);
      if (typeof words === 'string') expect.soft(reply.message, JSON.stringify(fields)).toContain(words);
      else expect.soft(reply.message, JSON.stringify(fields)).toMatch(words);
    }
    // The command line keeps its words.
    const cli = await runCli(['milestone', '--load', 'L-MW', '--code', 'D1', '--stop', '1', '--city', 'Chicago', '--config', join(fx.tmp.dir, 'agent.toml')]);
    expect(cli.stderr).toBe('warning: Chicago cannot be looked up in the gazetteer without --state: sent as typed, with the zone of stop 1 (America/Chicago)\n');
  });

  it("a load started with a warning is answered in dispatch's words: resourceId, the stops' appointments, no stops file", async () => {
    await startBroker();
    await fx.sandbox.start();
    // A source that tags its readings TRUCK-A (a file of no sentences: it feeds nothing here).
    const fixes = writeFile(fx.tmp.dir, 'none.nmea', '');
    await run(fleetConfig(`[[sources]]\ntype = "nmea"\nresource_id = "TRUCK-A"\ndevice = "${fixes}"\n`));
    const d = await dispatch();
    const unfed = await send(d, 'truck-a', 'load-start', { commandId: 'lw-1', loadNumber: 'L-LW1', resourceId: 'truck-a' });
    expect(unfed).toMatchObject({ ok: true, status: 0 });
    // Soft: one run says which of them fail.
    expect
      .soft(unfed.message)
      .toContain(
        'warning: resourceId "truck-a": the sources tag their readings "TRUCK-A", so this load gets no positions (did you mean "TRUCK-A"? resource ids are case-sensitive); end it with a load-end command and start it again with the right resourceId, or add a source for it in the device\'s config',
      );
    expect.soft(unfed.message).not.toMatch(/--[a-z]/);
    const { skipped, repeated } = chicagoClockChanges(Date.now());
    const ended = new Date(Date.now() - 49 * 3_600_000).toISOString().replace(/\.\d+Z$/, 'Z');
    const chicago = { latitude: 41.8781, longitude: -87.6298 };
    const stops = [
      { sequence: 1, type: 'pickup', ...chicago, appointment: { start: `${skipped}T02:30:00` } },
      { sequence: 2, type: 'delivery', ...chicago, appointment: { end: `${repeated}T01:30:00` } },
      { sequence: 3, type: 'delivery', ...chicago, appointment: { end: ended } },
    ];
    const reply = await send(d, 'truck-a', 'load-start', { commandId: 'lw-2', loadNumber: 'L-LW2', resourceId: 'TRUCK-A', stops });
    expect(reply).toMatchObject({ ok: true, status: 0 });
    expect.soft(reply.message).not.toMatch(/--[a-z]/);
    // Named by the stops' own fields, as dispatch sent them (the CLI's words, from a stops file, are the same).
    expect
      .soft(reply.message)
      .toContain(`warning: stop 1 appointment.start: ${skipped}T02:30:00 does not exist in America/Chicago (the clocks skip it): read as ${skipped}T03:30:00-05:00; give the offset if another time was meant`);
    expect
      .soft(reply.message)
      .toContain(
        `warning: stop 2 appointment.end: ${repeated}T01:30:00 occurs twice in America/Chicago: read as the first, ${repeated}T01:30:00-05:00; give the offset (such as ${repeated}T01:30:00-06:00) if the second was meant`,
      );
    // Dispatch sent no stops file.
    expect.soft(reply.message).toMatch(/warning: stop 3 appointment\.end \S+ was 49 h ago: a delay \(SD\) will be reported for this stop until the truck arrives; check the dates of the stops' appointments$/);
  });

  it('a response topic holding a wildcard is not published to: the broker would drop the link and hand the command over again, for ever', async () => {
    await linked();
    const d = await dispatch();
    const replies = await watch(d, 'fleet/truck-a/reply/+');
    // mosquitto takes this from dispatch, and disconnects a client that publishes to it.
    await d.publishAsync('fleet/truck-a/cmd/status', JSON.stringify({ commandId: 'wild-1' }), { qos: 1, properties: { responseTopic: 'fleet/truck-a/reply/#', correlationData: Buffer.from('c') } });
    await waitFor(() => replies.find((r) => r.body.commandId === 'wild-1'), 10_000, 'the answer on reply/wild-1');
    await new Promise((r) => setTimeout(r, 4000));
    expect(fx.daemon!.output().split('connected to the fleet broker').length - 1).toBe(1);
    expect(replies.filter((r) => r.body.commandId === 'wild-1').map((r) => r.topic)).toEqual(['fleet/truck-a/reply/wild-1']);
    expect(fx.daemon!.output()).toContain('not a topic the answer can be published to');
    expect(await send(d, 'truck-a', 'status', { commandId: 'after-1' })).toMatchObject({ ok: true, status: 0 });
  });

  it('a status or an answer the broker’s ACL refuses is logged as an error naming the topic and the user, once a connection', async () => {
    await startBroker();
    await fx.sandbox.start();
    // The device logs in as truck-b, but its topics are truck-a's: the ACL (user = device id) refuses them.
    const pw = writeFile(fx.tmp.dir, 'b-password', `${USERS['truck-b']}\n`, 0o600);
    const cfg = agentConfig(fx.tmp.dir, fx.sandbox.url, `[fleet]\nurl = "${broker.url}"\nusername = "truck-b"\npassword_file = "${pw}"\nstatus_interval_s = 5\n`, { deviceId: 'truck-a' });
    await run(cfg);
    const refused = () =>
      fx
        .daemon!.output()
        .split('\n')
        .filter((l) => l.includes('refuses what this device publishes'))
        .map((l) => JSON.parse(l) as { level: number; msg: string });
    await waitFor(() => refused().length > 0, 10_000, 'the refusal in the log');
    await new Promise((r) => setTimeout(r, 6000)); // a second status, refused too
    expect(refused()).toHaveLength(1);
    expect(refused()[0].level).toBe(50);
    expect(refused()[0].msg).toContain('fleet/truck-a/status');
    expect(refused()[0].msg).toContain('truck-b');
    expect(fx.daemon!.output()).not.toContain(USERS['truck-b']);
  });

  it("a relative password_file is the config directory's, not the daemon's working directory's (/ under systemd)", async () => {
    await startBroker();
    await fx.sandbox.start();
    writeFile(fx.tmp.dir, 'fleet-password', `${USERS['truck-a']}\n`, 0o600);
    // The daemon runs in the clone; the file is beside the config only.
    const cfg = agentConfig(fx.tmp.dir, fx.sandbox.url, `[fleet]\nurl = "${broker.url}"\nusername = "truck-a"\npassword_file = "fleet-password"\n`, { deviceId: 'truck-a' });
    await run(cfg);
    expect(await send(await dispatch(), 'truck-a', 'status', { commandId: 'rel-1' })).toMatchObject({ ok: true, status: 0 });
    expect(fx.daemon!.output()).not.toContain('cannot read fleet.password_file');
  });

  it('a broker that closes the link soon after accepting it (a cloned device with the same client id) is not fought every second', async () => {
    await linked();
    const connects = () => fx.daemon!.output().split('connected to the fleet broker').length - 1;
    // The clone: same user, same client id, back 300 ms after each time it is thrown off;
    // mosquitto closes the older connection of a client id without a word.
    const clone = connect(broker.url, { protocolVersion: 5, clientId: 'telematics-agent-truck-a', username: 'truck-a', password: USERS['truck-a'], clean: false, reconnectPeriod: 300 });
    clients.push(clone);
    await new Promise((r) => setTimeout(r, 12_000));
    clone.end(true);
    // Backing off from 1 s (full jitter) the link comes back about 5 times in 12 s; it came back 20.
    expect(connects()).toBeLessThanOrEqual(9);
    const line = fx
      .daemon!.output()
      .split('\n')
      .find((l) => l.includes('closed by the broker'));
    expect(JSON.parse(line ?? '{}').msg).toContain('telematics-agent-truck-a');
    // Back once the clone is gone (its session, expiring at once, took the link's with it), and answering.
    const out = () => fx.daemon!.output();
    await waitFor(() => out().lastIndexOf('connected to the fleet broker') > out().lastIndexOf('closed by the broker'), 150_000, 'the link back once the clone is gone');
    await new Promise((r) => setTimeout(r, 500));
    expect(await send(await dispatch(), 'truck-a', 'status', { commandId: 'back-1' })).toMatchObject({ ok: true });
  }, 200_000);

  it('`status` says whether the link is up, and why not when the broker is gone', async () => {
    const cfg = await linked();
    const fleetRow = async () => (await runCli(['status', '--config', cfg])).stdout.split('\n').find((l) => l.startsWith('fleet link:'));
    await waitFor(async () => (await fleetRow())?.includes(`connected to ${broker.url} as telematics-agent-truck-a`), 10_000, 'the link up in status');
    await broker.stop();
    const down = await waitFor(async () => (await fleetRow())?.includes('NOT CONNECTED') && fleetRow(), 15_000, 'the link down in status');
    expect(down).toContain(broker.url);
    expect(down).not.toContain(USERS['truck-a']);
    const json = JSON.parse((await runCli(['status', '--json', '--config', cfg])).stdout);
    expect(json.fleet).toMatchObject({ connected: false, url: broker.url });
  });

  it('`fleet send` to a device the broker holds no session for says nothing is queued, instead of waiting for an answer', async () => {
    await linked();
    await fx.daemon!.stop('SIGTERM'); // truck-a's session stays at the broker, and takes commands
    const pw = writeFile(fx.tmp.dir, 'dispatch-pw', `${USERS.dispatch}\n`);
    const sendTo = (device: string) => runCli(['fleet', 'send', '--url', broker.url, '--username', 'dispatch', '--password-file', pw, '--device', device, '--timeout', '2', 'status', '--json', '{}']);
    const typo = await sendTo('truck-zz');
    expect(typo.code).toBe(1);
    expect(typo.stderr).toContain('no device holds a session for fleet/truck-zz/cmd/status');
    expect(typo.stderr).not.toContain('stays queued');
    const away = await sendTo('truck-a');
    expect(away.code).toBe(1);
    expect(away.stderr).toContain('stays queued at the broker');
  });

  it('a reload that changes [fleet] reconnects without telling the desk the agent stopped', async () => {
    const status = await online();
    const cfg = join(fx.tmp.dir, 'agent.toml');
    writeFile(fx.tmp.dir, 'agent.toml', readFileSync(cfg, 'utf8').replace('status_interval_s = 5', 'status_interval_s = 6'));
    const seen = status.length;
    fx.daemon!.child.kill('SIGHUP');
    await waitFor(() => fx.daemon!.output().includes('configuration reloaded'), 10_000, 'the reload');
    await waitFor(() => fx.daemon!.output().split('connected to the fleet broker').length > 2, 10_000, 'the new connection');
    await waitFor(() => status.slice(seen).find((s) => s.body.online === true), 10_000, 'the status of the new connection');
    expect(status.slice(seen).filter((s) => s.body.online === false)).toEqual([]);
  });

  /** A linked daemon that said it is online, and dispatch watching its status. */
  async function online() {
    await linked();
    const d = await dispatch();
    const status = await watch(d, 'fleet/truck-a/status');
    await waitFor(() => status.find((s) => s.body.online === true), 10_000, 'online');
    return status;
  }

  it('the Last Will says offline within keepalive x 1.5 after kill -9', async () => {
    const status = await online();
    await new Promise((r) => setTimeout(r, 3000));
    const killedAt = Date.now();
    fx.daemon!.child.kill('SIGKILL');
    const will = await waitFor(() => status.find((s) => s.body.online === false), 15_000, 'the Last Will');
    expect(Date.now() - killedAt).toBeLessThanOrEqual(5 * 1.5 * 1000 + 500);
    expect(will.body).toMatchObject({ online: false, deviceId: 'truck-a', reason: 'connection lost' });
    // The will is written at connect: a time in it was the connect's, days before the loss on a truck.
    if ('time' in will.body) expect(Date.parse(String(will.body.time))).toBeGreaterThanOrEqual(killedAt - 1000);
  });

  it('the Last Will says offline when the agent goes silent without closing its connection (a power cut: SIGSTOP), and it is back online after', async () => {
    const status = await online();
    // Frozen: the socket stays open and says nothing; only the broker's keepalive (5 s x 1.5) can tell.
    fx.daemon!.child.kill('SIGSTOP');
    const will = await waitFor(() => status.find((s) => s.body.online === false), 15_000, 'the Last Will');
    expect(will.body).toMatchObject({ online: false, deviceId: 'truck-a', reason: 'connection lost' });
    const seen = status.length;
    fx.daemon!.child.kill('SIGCONT');
    await waitFor(() => status.slice(seen).find((s) => s.body.online === true), 20_000, 'online again');
  });

  it('with the ACL, device A can neither read B’s commands nor publish B’s status; a command from a device is not delivered', async () => {
    await startBroker();
    const a = await client({ username: 'truck-a', password: USERS['truck-a'], clientId: 'probe-a' });
    // mosquitto grants the subscription and delivers nothing the ACL does not let A read.
    const bCmds = await watch(a, 'fleet/truck-b/cmd/#');
    const ownCmds = await watch(a, 'fleet/truck-a/cmd/#');
    const d = await dispatch();
    await d.publishAsync('fleet/truck-b/cmd/load-end', JSON.stringify({ commandId: 'for-b', loadNumber: 'L' }), { qos: 1 });
    await d.publishAsync('fleet/truck-a/cmd/load-end', JSON.stringify({ commandId: 'for-a', loadNumber: 'L' }), { qos: 1 });
    await waitFor(() => ownCmds[0], 5000, 'A getting its own command');
    const bStatus = await watch(d, 'fleet/truck-b/status');
    // MQTT 5: the broker answers the PUBACK with 135, not authorised.
    await expect(a.publishAsync('fleet/truck-b/status', JSON.stringify({ online: true }), { qos: 1 })).rejects.toThrow('Not authorized');
    // Device B sending a command to A: refused by the broker too.
    const b = await client({ username: 'truck-b', password: USERS['truck-b'], clientId: 'probe-b' });
    await expect(b.publishAsync('fleet/truck-a/cmd/load-end', JSON.stringify({ commandId: 'x', loadNumber: 'L' }), { qos: 1 })).rejects.toThrow('Not authorized');
    await new Promise((r) => setTimeout(r, 500));
    expect(bStatus).toEqual([]);
    expect(bCmds).toEqual([]);
    expect(ownCmds.map((c) => c.body.commandId)).toEqual(['for-a']);
  });

  it('connects over TLS with a client certificate made by openssl', async () => {
    const pkiDir = join(fx.tmp.dir, 'pki');
    mkdirSync(pkiDir);
    const pki = makePki(pkiDir);
    // The device's certificate, CN = its device id (mosquitto takes it as the user name).
    const openssl = (...args: string[]) => execFileSync('openssl', args, { cwd: pkiDir, stdio: 'ignore' });
    openssl('req', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=truck-a', '-keyout', 'device.key', '-out', 'device.csr');
    openssl('x509', '-req', '-in', 'device.csr', '-CA', 'test-ca.pem', '-CAkey', 'test-ca.key', '-CAcreateserial', '-days', '2', '-out', 'device.pem');
    await startBroker({ tls: { cert: pki.cert, key: pki.key, clientCa: pki.caFile }, acl: FLEET_ACL });
    await fx.sandbox.start();
    const cfg = agentConfig(fx.tmp.dir, fx.sandbox.url, `[fleet]\nurl = "${broker.url}"\nca_file = "${pki.caFile}"\ncert_file = "${join(pkiDir, 'device.pem')}"\nkey_file = "${join(pkiDir, 'device.key')}"\n`, {
      deviceId: 'truck-a',
    });
    await run(cfg);
    // Without a certificate the broker refuses the connection.
    await expect(client({ ca: [pki.cert], clientId: 'no-cert', connectTimeout: 3000 })).rejects.toThrow();
    expect(fx.daemon!.output()).not.toContain('BEGIN');
  });
});

/** TRUCK-H: 30 fixes in Querétaro from `base`, 10 s apart, at once; then one in Hermosillo, stamped now, every 200 ms. */
const MOVED = (base: number) => `let t;
export function createSource(ctx) {
  return {
    start() {
      for (let i = 0; i < 30; i++) ctx.emit({ resourceId: 'TRUCK-H', timeMs: ${base} + i * 10000, lat: 20.5888, lon: -100.3899, speed: 0 });
      t = setInterval(() => ctx.emit({ resourceId: 'TRUCK-H', timeMs: Date.now(), lat: 29.0729, lon: -110.9559, speed: 0 }), 200);
    },
    stop() { clearInterval(t); },
  };
}
`;

/** The next days, a day or more after `nowMs`, on which Chicago's clocks skip an hour (the second Sunday of March) and repeat one (the first Sunday of November). */
function chicagoClockChanges(nowMs: number): { skipped: string; repeated: string } {
  const sunday = (year: number, month: number, nth: number) => {
    const first = 1 + ((7 - new Date(Date.UTC(year, month - 1, 1)).getUTCDay()) % 7);
    return `${year}-${String(month).padStart(2, '0')}-${String(first + 7 * (nth - 1)).padStart(2, '0')}`;
  };
  const next = (month: number, nth: number) => {
    const year = new Date(nowMs).getUTCFullYear();
    const day = sunday(year, month, nth);
    return Date.parse(`${day}T00:00:00Z`) > nowMs + 86_400_000 ? day : sunday(year + 1, month, nth);
  };
  return { skipped: next(3, 2), repeated: next(11, 1) };
}

function topicMatch(filter: string, topic: string): boolean {
  const f = filter.split('/');
  const t = topic.split('/');
  for (let i = 0; i < f.length; i++) {
    if (f[i] === '#') return true;
    if (f[i] !== '+' && f[i] !== t[i]) return false;
  }
  return f.length === t.length;
}
