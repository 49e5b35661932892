/**
 * Rows 10, on the wire: what a truck-day costs a cellular data plan. The real Agent
 * (bench/wire-worker.ts) pushes one truck-day at the defaults in compressed time: 96 pushes
 * of 15 points (a push every 15 minutes at 60 s sampling) and a milestone every 2 hours, to
 * the sandbox served over TLS with a realistic chain (a root, an intermediate and a leaf, RSA
 * 2048, made with openssl; all three sent) and an idle timeout of 60 s. Between pushes the
 * bench lets the 15 minutes pass at the service: its idle timeout (60 s) closes what was
 * left open (closeIdle). Bytes are counted both ways by a TCP proxy in front of the sandbox:
 * TLS records included; TCP/IP headers are estimated per packet and reported apart. TLS
 * ticket lifetimes are not compressed: the service's must outlive a push interval.
 *
 * References in the same run: the peer's pattern (a request per point, a new connection and
 * a full handshake each), and the physical floor: the same positions as Teltonika Codec 8
 * records, computed, not sent.
 */
import { execFileSync, fork, type ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { packageFile } from '../src/paths.js';
import { Sandbox } from '../src/sandbox/server.js';
import { BENCH_KEY, BENCH_SCAC } from './common.js';
import { AGENT_NODE_OPTIONS, QUICK } from './options.js';
import { children, waitExit } from './processes.js';
import { fmt, pct, round, type Row } from './report.js';
import { MILESTONE_EVERY, POINTS_PER_PUSH, PUSH_S, SAMPLING_S, type WireCommand, type WireEvent } from './wire-worker.js';

const WIRE_WORKER = packageFile('dist-bench', 'bench', 'wire-worker.js');
/** Pushes in a day at the default schedule; a quick run does an eighth and scales up. */
const DAY_PUSHES = 86_400 / PUSH_S;
export const WIRE_PUSHES = QUICK ? 12 : DAY_PUSHES;
const PEER_REQUESTS = QUICK ? 60 : 480;
const MONTH_DAYS = 30;
/** IPv4 (20) + TCP (20) + timestamps option (12): what a Linux segment carries besides its data. */
const HEADER_BYTES = 52;
/** An Ethernet-sized MSS with timestamps; a cellular link's is close to it. */
const MSS = 1448;

/** Bytes and estimated packets through the proxy, both ways. */
export interface Tally {
  up: number;
  down: number;
  connections: number;
  /** Estimated IP packets: SYN/SYN-ACK/ACK and FIN/ACK x2 per connection, data segments and delayed ACKs per write. */
  packets: number;
}

const newTally = (): Tally => ({ up: 0, down: 0, connections: 0, packets: 0 });

/** A TCP proxy to `port` on loopback counting what crosses it into `tally()`. */
async function countingProxy(port: number, tally: () => Tally): Promise<{ server: Server; port: number; open: Set<Socket> }> {
  const open = new Set<Socket>();
  const segments = (n: number) => Math.ceil(n / MSS);
  const server = createServer((client) => {
    const t = tally();
    t.connections += 1;
    t.packets += 7;
    const upstream = connect(port, '127.0.0.1');
    open.add(client);
    const count = (from: Socket, to: Socket, dir: 'up' | 'down') =>
      from.on('data', (d: Buffer) => {
        const s = segments(d.length);
        const now = tally();
        now[dir] += d.length;
        // Each flight's segments, and about one ACK for every two of them from the other side.
        now.packets += s + Math.ceil(s / 2);
        to.write(d);
      });
    count(client, upstream, 'up');
    count(upstream, client, 'down');
    client.on('end', () => upstream.end());
    upstream.on('end', () => client.end());
    const gone = () => {
      open.delete(client);
      client.destroy();
      upstream.destroy();
    };
    client.on('close', gone).on('error', gone);
    upstream.on('close', gone).on('error', gone);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return { server, port: (server.address() as { port: number }).port, open };
}

/** A root, an intermediate and a leaf for 127.0.0.1, RSA 2048, made with openssl in `dir`. */
function makeChain(dir: string): { caFile: string; cert: string; key: string } {
  mkdirSync(dir, { recursive: true });
  const openssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  writeFileSync(join(dir, 'ca.ext'), 'basicConstraints = critical, CA:true\nkeyUsage = critical, keyCertSign, cRLSign\nsubjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid\n');
  writeFileSync(
    join(dir, 'leaf.ext'),
    'basicConstraints = CA:false\nkeyUsage = critical, digitalSignature, keyEncipherment\nextendedKeyUsage = serverAuth\nsubjectAltName = IP:127.0.0.1, DNS:localhost\nsubjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid\n',
  );
  openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2', '-subj', '/C=US/O=Bench Trust Services/CN=Bench Root CA R1', '-keyout', 'root.key', '-out', 'root.pem');
  openssl('req', '-newkey', 'rsa:2048', '-nodes', '-subj', '/C=US/O=Bench Trust Services/CN=Bench Issuing CA 01', '-keyout', 'inter.key', '-out', 'inter.csr');
  openssl('x509', '-req', '-in', 'inter.csr', '-CA', 'root.pem', '-CAkey', 'root.key', '-CAcreateserial', '-days', '2', '-extfile', 'ca.ext', '-out', 'inter.pem');
  openssl('req', '-newkey', 'rsa:2048', '-nodes', '-subj', '/C=US/ST=Texas/L=Dallas/O=Logistics Service Inc/CN=api.logistics.example', '-keyout', 'leaf.key', '-out', 'leaf.csr');
  openssl('x509', '-req', '-in', 'leaf.csr', '-CA', 'inter.pem', '-CAkey', 'inter.key', '-CAcreateserial', '-days', '2', '-extfile', 'leaf.ext', '-out', 'leaf.pem');
  const pem = (name: string) => readFileSync(join(dir, name), 'utf8');
  return { caFile: join(dir, 'root.pem'), cert: pem('leaf.pem') + pem('inter.pem') + pem('root.pem'), key: pem('leaf.key') };
}

export interface WireRun {
  name: string;
  tally: Tally;
  jsonBytes: number;
  bodyBytes: number;
  full: number;
  resumed: number;
  requests: number;
  points: number;
  /** Days this run stands for (a quick run is a fraction of one). */
  days: number;
}

/** One worker run against the sandbox through the proxy, the idle time between pushes let pass at the service. */
async function runWorker(sandbox: Sandbox, proxy: Awaited<ReturnType<typeof countingProxy>>, tally: { current: Tally }, c: WireCommand, name: string, days: number): Promise<WireRun> {
  sandbox.reset();
  sandbox.stats.wire.handshakes = { full: 0, resumed: 0 };
  tally.current = newTally();
  const child: ChildProcess = fork(WIRE_WORKER, [], { stdio: ['ignore', 'ignore', 'inherit', 'ipc'], execArgv: AGENT_NODE_OPTIONS.split(/\s+/) });
  children.add(child);
  const done = new Promise<Extract<WireEvent, { ev: 'done' }>>((resolve, reject) => {
    child.on('message', (e: WireEvent) => {
      if (e.ev === 'error') reject(new Error(`wire worker: ${e.message}`));
      else if (e.ev === 'done') resolve(e);
      else void idleGap().then(() => child.send({ cmd: 'next' } satisfies WireCommand));
    });
    child.on('exit', (code) => reject(new Error(`wire worker exited (code ${code})`)));
  });
  // The 15 minutes to the next push: the service's idle timeout (60 s) closes what is open.
  const idleGap = async () => {
    await settle(proxy.open);
    sandbox.closeIdle();
    await settle(proxy.open, true);
  };
  child.send(c);
  const d = await done;
  await waitExit(child);
  await settle(proxy.open, true);
  const s = sandbox.stats;
  return {
    name,
    tally: tally.current,
    jsonBytes: s.wire.jsonBytes,
    bodyBytes: s.wire.bodyBytes,
    full: s.wire.handshakes.full,
    resumed: s.wire.handshakes.resumed,
    requests: d.traceRequests + d.milestones,
    points: d.tracePoints,
    days,
  };
}

/** Wait until the proxy's connections are closed (`all`), or until nothing crossed it for 50 ms. */
async function settle(open: Set<Socket>, all = false): Promise<void> {
  const deadline = performance.now() + 2000;
  await new Promise((r) => setTimeout(r, 50));
  while (all && open.size > 0 && performance.now() < deadline) await new Promise((r) => setTimeout(r, 10));
}

export interface WireScenario {
  name: string;
  api?: Record<string, unknown>;
  traces?: Record<string, unknown>;
}

/** The scenarios: the defaults first, then each lever. */
export const WIRE_SCENARIOS: WireScenario[] = [
  { name: 'defaults' },
  { name: 'gzip', api: { compress: 'gzip' } },
  { name: 'no references', traces: { references: 'none' } },
  { name: 'gzip, no references', api: { compress: 'gzip' }, traces: { references: 'none' } },
];

export async function benchWire(dir: string): Promise<{ runs: WireRun[]; peer: WireRun; codec8PerDay: number }> {
  const pki = makeChain(join(dir, 'wire-pki'));
  const sandbox = new Sandbox({ key: BENCH_KEY, scac: BENCH_SCAC, keepBodies: false, tls: { cert: pki.cert, key: pki.key }, idleTimeoutMs: 60_000 });
  await sandbox.start();
  const tally = { current: newTally() };
  const proxy = await countingProxy(sandbox.port, () => tally.current);
  const url = `https://127.0.0.1:${proxy.port}`;
  try {
    const runs: WireRun[] = [];
    for (const s of WIRE_SCENARIOS) {
      const dbPath = join(dir, `wire-${s.name}.db`);
      runs.push(await runWorker(sandbox, proxy, tally, { cmd: 'agent', url, caFile: pki.caFile, dbPath, pushes: WIRE_PUSHES, api: s.api, traces: s.traces }, s.name, WIRE_PUSHES / DAY_PUSHES));
      for (const suffix of ['', '-wal', '-shm']) rmSync(dbPath + suffix, { force: true });
    }
    const peer = await runWorker(sandbox, proxy, tally, { cmd: 'peer', url, caFile: pki.caFile, requests: PEER_REQUESTS }, 'peer', PEER_REQUESTS / (86_400 / SAMPLING_S));
    return { runs, peer, codec8PerDay: codec8PerDay() };
  } finally {
    proxy.server.close();
    for (const s of proxy.open) s.destroy();
    await sandbox.stop();
  }
}

/**
 * The same positions as Teltonika Codec 8 over TCP, computed: per connection the IMEI login
 * (2 + 15 bytes, 1 byte accepted); per packet 4 zero bytes, a 4-byte length, codec id, record
 * count at both ends and a CRC (15 bytes) and the server's 4-byte count back; per record a
 * timestamp (8), priority (1), GPS element (15) and an IO element with a 2-byte temperature
 * and a 4-byte odometer (14): 38 bytes. One packet and one connection per push.
 */
export function codec8PerDay(): number {
  const record = 8 + 1 + 15 + 14;
  const perPush = 2 + 15 + 1 + 15 + POINTS_PER_PUSH * record + 4;
  return DAY_PUSHES * perPush;
}

const perDay = (r: WireRun, n: number) => n / r.days;
const kb = (n: number) => `${fmt(n / 1000)} KB`;
const mbMonth = (n: number) => `${round((n * MONTH_DAYS) / 1e6, 1)} MB/month`;
export const wireOf = (r: WireRun) => r.tally.up + r.tally.down;

export function wireRows(w: Awaited<ReturnType<typeof benchWire>>): Row[] {
  const [base] = w.runs;
  const rows: Row[] = [];
  for (const [i, r] of w.runs.entries()) {
    const id = i === 0 ? '10a' : `10${String.fromCharCode(0x66 + i - 1)}`;
    const bytes = perDay(r, wireOf(r));
    const ratio = wireOf(r) / (i === 0 ? r.jsonBytes : base.jsonBytes);
    const target = r.name === 'defaults' ? 1.2 : r.name === 'gzip' ? 0.35 : undefined;
    rows.push({
      id,
      measure: `on the wire, a truck-day (${r.name}; TLS, ${fmt(perDay(r, r.requests))} requests, ${fmt(perDay(r, r.tally.connections))} connections; up ${kb(perDay(r, r.tally.up))}, down ${kb(perDay(r, r.tally.down))})`,
      value: `${kb(bytes)}/day, ${mbMonth(bytes)}`,
      reference: `${kb(perDay(base, base.jsonBytes))} payload JSON${i === 0 ? '' : ' (defaults)'}`,
      ratio: `${round(ratio, 2)}x`,
      target: target === undefined ? '' : `<= ${target}x`,
      pass: target === undefined ? null : ratio <= target,
    });
  }
  rows.push({
    id: '10b',
    measure: `TLS handshakes of the agent in the run at the defaults (one start, ${fmt(base.requests)} requests; ${fmt(perDay(base, base.full))} full a day)`,
    value: `${fmt(base.full)} full, ${fmt(base.resumed)} resumed`,
    reference: '',
    ratio: '',
    target: '<= 1 full per start',
    pass: base.full <= 1,
  });
  rows.push({
    id: '10c',
    measure: `TCP/IP headers of the same, estimated (${fmt(perDay(base, base.tally.packets))} packets x ${HEADER_BYTES} B)`,
    value: `${kb(perDay(base, base.tally.packets * HEADER_BYTES))}/day`,
    reference: `payload JSON ${pct(base.jsonBytes / (wireOf(base) + base.tally.packets * HEADER_BYTES))} of all bytes`,
    ratio: '',
    target: '',
    pass: null,
  });
  const peer = w.peer;
  rows.push({
    id: '10d',
    measure: `peer pattern: a request per point, a new connection and a full handshake each (${fmt(peer.requests)} requests measured, scaled to a day of 60 s points)`,
    value: `${kb(perDay(peer, wireOf(peer)))}/day, ${mbMonth(perDay(peer, wireOf(peer)))}`,
    reference: `${kb(perDay(peer, peer.jsonBytes))} payload JSON`,
    ratio: `${round(wireOf(peer) / peer.jsonBytes, 1)}x`,
    target: '',
    pass: null,
  });
  rows.push({
    id: '10e',
    measure: `floor: the same positions as Teltonika Codec 8 records (computed, a packet per push, ${POINTS_PER_PUSH} records of 38 B)`,
    value: `${kb(w.codec8PerDay)}/day, ${mbMonth(w.codec8PerDay)}`,
    reference: '',
    ratio: `${round(perDay(base, wireOf(base)) / w.codec8PerDay, 1)}x (ours)`,
    target: '',
    pass: null,
  });
  return rows;
}

export function wireFigures(w: Awaited<ReturnType<typeof benchWire>>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const r of [...w.runs, w.peer]) {
    const name = r.name.replace(/[^a-z0-9]+(.)/gi, (_, c: string) => c.toUpperCase());
    out[`wire_${name}_bytesPerDay`] = perDay(r, wireOf(r));
    out[`wire_${name}_jsonBytesPerDay`] = perDay(r, r.jsonBytes);
    out[`wire_${name}_ratio`] = wireOf(r) / r.jsonBytes;
    out[`wire_${name}_headerBytesPerDay`] = perDay(r, r.tally.packets * HEADER_BYTES);
    out[`wire_${name}_connectionsPerDay`] = perDay(r, r.tally.connections);
    // Figures are positive numbers: a count that is 0 is left out.
    if (r.full > 0) out[`wire_${name}_fullHandshakesPerDay`] = perDay(r, r.full);
    if (r.resumed > 0) out[`wire_${name}_resumedHandshakesPerDay`] = perDay(r, r.resumed);
  }
  out.wireCodec8BytesPerDay = w.codec8PerDay;
  return out;
}

export { MILESTONE_EVERY };
