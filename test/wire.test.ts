import { readFileSync } from 'node:fs';
import { createServer, type Socket } from 'node:net';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ApiClient } from '../src/api/client.js';
import { Sandbox } from '../src/sandbox/server.js';
import { TEST_KEY, TEST_SCAC, tempDir } from './helpers.js';
import { makePki, type Pki } from './pki.js';

// What a push costs on the wire, against the real sandbox over TLS on port 0.
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

let pki: Pki;
const tmp = tempDir();
let sandbox: Sandbox | undefined;
let client: ApiClient | undefined;

beforeAll(() => {
  pki = makePki(tmp.dir);
});
afterAll(() => tmp.cleanup());
afterEach(async () => {
  await client?.close();
  client = undefined;
  await sandbox?.stop();
  sandbox = undefined;
});

const trace = (i: number) => ({
  loadNumber: 'L1',
  traces: [
    {
      time: { dateTime: '2025-03-01T08:00:00-06:00', timeZoneCode: 'CST', timeZoneOffset: 'UTC-6' },
      resourceId: 'TRUCK-1',
      resourceType: 'Truck',
      coordinate: { latitude: 41.8 + i / 1000, longitude: -87.6 },
      references: [{ name: 'traceId', value: `dev-${i}` }],
    },
  ],
});

async function start(opts: Partial<ConstructorParameters<typeof Sandbox>[0]> = {}): Promise<{ sandbox: Sandbox; client: ApiClient }> {
  sandbox = new Sandbox({ key: TEST_KEY, scac: TEST_SCAC, tls: { cert: pki.cert, key: pki.key }, idleTimeoutMs: 60_000, ...opts });
  const { url } = await sandbox.start();
  client = new ApiClient(clientOptions(url));
  return { sandbox, client };
}

describe('TLS sessions across pushes', () => {
  it('resumes the session on the next push after the service closed the idle connection, a collection between', async () => {
    const { sandbox, client } = await start();
    for (let push = 0; push < 3; push++) {
      const out = await client.postTraces(trace(push), `key-${push}`);
      expect(out).toMatchObject({ kind: 'response', status: 200 });
      // 15 minutes later: the service's idle timeout closed the connection, the daemon collected garbage.
      sandbox.closeIdle();
      await new Promise((r) => setTimeout(r, 50));
      gc();
    }
    expect(sandbox.stats.wire.handshakes).toEqual({ full: 1, resumed: 2 });
  });
});

/** A push of `n` points: some 200 B each, over compress_min_bytes from 6 on. */
const push = (n: number, from = 0) => ({ loadNumber: 'L1', traces: Array.from({ length: n }, (_, i) => trace(from + i).traces[0]) });

describe('the ClientHello', () => {
  /** The first TLS record a client sends to a bare TCP listener: its ClientHello. */
  async function firstRecord(tlsHello?: 'lean' | 'node'): Promise<Buffer> {
    const sockets = new Set<Socket>();
    let got: (b: Buffer) => void = () => {};
    const record = new Promise<Buffer>((r) => (got = r));
    const server = createServer((s) => {
      sockets.add(s);
      s.once('data', (d: Buffer) => {
        got(d);
        s.destroy();
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    const port = (server.address() as { port: number }).port;
    client = new ApiClient({ baseUrl: `https://127.0.0.1:${port}`, milestonePath: '/m', tracePath: '/t', scac: TEST_SCAC, subscriptionKey: TEST_KEY, timeoutMs: 2000, connectTimeoutMs: 2000, tlsHello });
    const out = await client.postTraces(trace(0), 'key-0');
    expect(out.kind).not.toBe('response');
    for (const s of sockets) s.destroy();
    server.close();
    return record;
  }

  it('offers TLS 1.3 and forward-secret AEAD suites of TLS 1.2 only: some 120 bytes less at every connection than the defaults of Node', async () => {
    const hello = await firstRecord();
    expect(hello[0]).toBe(22); // a handshake record
    expect(hello[5]).toBe(1); // ClientHello
    const recordBytes = 5 + hello.readUInt16BE(3);
    // Node's defaults: some 350 B; ours some 240 (no server name: an IP address).
    expect(recordBytes).toBeLessThan(260);
    let at = 5 + 4 + 2 + 32;
    at += 1 + hello[at]!; // legacy session id
    const suitesLen = hello.readUInt16BE(at);
    const suites = Array.from({ length: suitesLen / 2 }, (_, i) => hello.readUInt16BE(at + 2 + 2 * i));
    // TLS 1.3's three, ECDHE-ECDSA/RSA with AES-GCM or ChaCha20-Poly1305, DHE-RSA AES-GCM, and the renegotiation SCSV.
    const allowed = new Set([0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030, 0xcca9, 0xcca8, 0x009e, 0x009f, 0x00ff]);
    expect(suites.filter((s) => !allowed.has(s)).map((s) => s.toString(16))).toEqual([]);
    expect(suites).toEqual(expect.arrayContaining([0x1301, 0x1302, 0x1303, 0xc02f, 0xc02b]));
  });

  it('offers what Node offers with api.tls_hello = "node" (CBC suites among them), for a service that needs them', async () => {
    const hello = await firstRecord('node');
    expect(5 + hello.readUInt16BE(3)).toBeGreaterThan(300);
    const at = 5 + 4 + 2 + 32 + 1 + hello[5 + 4 + 2 + 32]!;
    const suites = Array.from({ length: hello.readUInt16BE(at) / 2 }, (_, i) => hello.readUInt16BE(at + 2 + 2 * i));
    // ECDHE-RSA-AES128-SHA256, a CBC suite of Node's default list.
    expect(suites).toContain(0xc027);
  });
});

describe('api.compress = "gzip"', () => {
  it('sends bodies from compress_min_bytes gzip-encoded; the sandbox takes them, the JSON unchanged', async () => {
    const { sandbox, client: c } = await start();
    const gz = new ApiClient({ ...clientOptions(sandbox.url), compression: { method: 'gzip', minBytes: 1024 } });
    try {
      const body = push(15);
      expect(await gz.postTraces(body, 'big')).toMatchObject({ status: 200 });
      expect(sandbox.traces[0].headers['content-encoding']).toBe('gzip');
      expect(sandbox.traces[0].body).toEqual(body);
      expect(sandbox.stats.wire.jsonBytes).toBe(Buffer.byteLength(JSON.stringify(body)));
      expect(sandbox.stats.wire.bodyBytes).toBeLessThan(sandbox.stats.wire.jsonBytes / 4);
      // Below the threshold: as it is.
      expect(await gz.postTraces(push(1, 100), 'small')).toMatchObject({ status: 200 });
      expect(sandbox.traces[1].headers['content-encoding']).toBeUndefined();
      expect(gz.transport.compress).toBe('gzip from 1024 B');
    } finally {
      await gz.close();
      await c.close();
    }
  });

  it('against a sandbox refusing gzip (--no-gzip): resends the same JSON uncompressed under the same key, says so once, compresses no more', async () => {
    const events: Array<{ status: number; key?: string; problem?: string }> = [];
    const { sandbox } = await start({ gzip: false, onRequest: (e) => events.push({ status: e.status, key: e.idempotencyKey, problem: e.problem }) });
    const refused: string[] = [];
    const gz = new ApiClient({ ...clientOptions(sandbox.url), compression: { method: 'gzip', minBytes: 1024 }, onCompressionRefused: (a) => refused.push(a) });
    try {
      const first = push(15);
      expect(await gz.postTraces(first, 'key-A')).toMatchObject({ kind: 'response', status: 200 });
      expect(events.map((e) => e.status)).toEqual([415, 200]);
      expect(sandbox.traces).toHaveLength(1);
      expect(sandbox.traces[0]).toMatchObject({ idempotencyKey: 'key-A', body: first });
      expect(sandbox.traces[0].headers['content-encoding']).toBeUndefined();
      expect(refused).toHaveLength(1);
      expect(refused[0]).toMatch(/^HTTP 415: .*gzip/);
      // The next push goes uncompressed at once: one request, no second notice.
      expect(await gz.postTraces(push(15, 50), 'key-B')).toMatchObject({ status: 200 });
      expect(events.map((e) => e.status)).toEqual([415, 200, 200]);
      expect(refused).toHaveLength(1);
      expect(gz.transport.compress).toMatch(/refused/);
    } finally {
      await gz.close();
    }
  });

  it('a 400 that names the encoding turns it off too; a 400 about the data does not', async () => {
    const { sandbox } = await start();
    const refused: string[] = [];
    const gz = new ApiClient({ ...clientOptions(sandbox.url), compression: { method: 'gzip', minBytes: 0 }, onCompressionRefused: (a) => refused.push(a) });
    try {
      sandbox.setFaults({ rejectLoads: ['L1'] });
      expect(await gz.postTraces(push(2), 'data')).toMatchObject({ status: 400 });
      expect(refused).toEqual([]);
      expect(sandbox.stats.faults.rejected).toBe(1);
    } finally {
      await gz.close();
    }
  });
});

/** The client of these tests: the sandbox at `url`, trusting the test PKI's CA. */
function clientOptions(url: string) {
  return {
    baseUrl: url,
    milestonePath: '/rcsc/events/v1/loads/milestone-requests',
    tracePath: '/rcsc/events/v1/loads/trace-requests',
    scac: TEST_SCAC,
    subscriptionKey: TEST_KEY,
    timeoutMs: 5000,
    ca: readFileSync(pki.caFile, 'utf8'),
  };
}
