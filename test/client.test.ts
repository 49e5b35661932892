import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { ApiClient } from '../src/api/client.js';

// The HTTP client against plain node:http servers on port 0 that misbehave on purpose.
let server: Server | undefined;
let client: ApiClient | undefined;
const sockets = new Set<Socket>();

afterEach(async () => {
  await client?.close();
  client = undefined;
  for (const s of sockets) s.destroy();
  sockets.clear();
  await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
  server = undefined;
});

async function serve(handler: (req: IncomingMessage, res: ServerResponse, nth: number) => void): Promise<string> {
  let n = 0;
  server = createServer((req, res) => {
    n += 1;
    handler(req, res, n);
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => server!.listen(0, '127.0.0.1', () => r()));
  return `http://127.0.0.1:${(server!.address() as AddressInfo).port}/base`;
}

function makeClient(baseUrl: string, timeoutMs = 2000): ApiClient {
  client = new ApiClient({ baseUrl, milestonePath: '/m', tracePath: '/t', scac: 'SCAC', subscriptionKey: 'secret-key-123', timeoutMs });
  return client;
}

const readBody = (req: IncomingMessage) =>
  new Promise<string>((r) => {
    let b = '';
    req.on('data', (d: Buffer) => (b += d.toString()));
    req.on('end', () => r(b));
  });

describe('ApiClient', () => {
  it('posts JSON to base path + path with the interface E headers and reads the answer', async () => {
    const seen: Array<{ url?: string; headers: IncomingMessage['headers']; body: string }> = [];
    const url = await serve(async (req, res) => {
      seen.push({ url: req.url, headers: req.headers, body: await readBody(req) });
      res.writeHead(429, { 'Retry-After': '7', 'Content-Type': 'application/json' }).end('{"error":"slow down"}');
    });
    const out = await makeClient(url).postTraces({ loadNumber: 'L1' }, 'key-1');
    expect(out).toMatchObject({ kind: 'response', status: 429, body: '{"error":"slow down"}', retryAfter: '7' });
    expect(seen[0].url).toBe('/base/t');
    expect(seen[0].headers).toMatchObject({
      'ocp-apim-subscription-key': 'secret-key-123',
      carrierscac: 'SCAC',
      'idempotency-key': 'key-1',
      'content-type': 'application/json',
      'content-length': String(Buffer.byteLength('{"loadNumber":"L1"}')),
    });
    expect(JSON.parse(seen[0].body)).toEqual({ loadNumber: 'L1' });
  });

  it('sends a body serialised ahead as bytes as it is, with their length', async () => {
    const seen: Array<{ length?: string; body: string }> = [];
    const url = await serve(async (req, res) => {
      seen.push({ length: req.headers['content-length'], body: await readBody(req) });
      res.writeHead(200).end('{}');
    });
    // Characters of more than one byte: the length is the bytes', not the text's.
    const json = JSON.stringify({ loadNumber: 'L1', eventCity: 'Montréal', note: 'Zürich → São Paulo' });
    const out = await makeClient(url).postTraces(Buffer.from(json), 'key-1');
    expect(out).toMatchObject({ kind: 'response', status: 200 });
    expect(seen).toEqual([{ length: String(Buffer.byteLength(json)), body: json }]);
    expect(Number(seen[0].length)).toBeGreaterThan(json.length);
  });

  it('never follows a redirect, and reports where it pointed', async () => {
    let hits = 0;
    const url = await serve((_req, res) => {
      hits += 1;
      res.writeHead(307, { Location: 'http://elsewhere.invalid/steal' }).end();
    });
    const out = await makeClient(url).postMilestone({}, 'k');
    expect(out).toMatchObject({ kind: 'response', status: 307, location: 'http://elsewhere.invalid/steal' });
    expect(hits).toBe(1);
  });

  it('gives up on a silent server after timeoutMs, as a network error', async () => {
    const url = await serve(() => {
      // Never answers.
    });
    const t0 = performance.now();
    const out = await makeClient(url, 300).postTraces({}, 'k');
    // Nothing else on the way gives up on a silent server within the test's time (node's
    // server waits 300 s for a request), so ETIMEDOUT at all is the client's own timer. The
    // lower bound is the behaviour (not before timeoutMs) and a timer never fires early; no
    // upper bound, which would only measure how busy the machine is.
    expect(out).toMatchObject({ kind: 'network', code: 'ETIMEDOUT' });
    expect(performance.now() - t0).toBeGreaterThanOrEqual(290);
  });

  it('keeps only the start of a huge answer, and stops reading there: that connection is not used again', async () => {
    let connections = 0;
    const url = await serve((req, res, nth) => {
      void readBody(req).then(() => {
        if (nth > 1) return res.writeHead(200).end('{}');
        res.writeHead(400, { 'Content-Type': 'text/plain' });
        res.end('x'.repeat(10 * 1024 * 1024));
      });
    });
    server!.on('connection', () => (connections += 1));
    const c = makeClient(url);
    const out = await c.postTraces({}, 'k');
    expect(out.kind).toBe('response');
    if (out.kind === 'response') {
      expect(out.status).toBe(400);
      // A dead letter keeps up to 64 KB of an answer; never the whole 10 MB.
      expect(out.body.length).toBeLessThanOrEqual(65_536 + 3);
      expect(out.body.length).toBeGreaterThanOrEqual(65_536);
      expect(out.body.endsWith('...')).toBe(true);
    }
    // The rest of the 10 MB was never read: the next request goes on a new connection.
    expect(await c.postTraces({}, 'k2')).toMatchObject({ kind: 'response', status: 200 });
    expect(connections).toBe(2);
  });

  it('gives up on an answer whose body never ends (trickled a byte at a time) within timeoutMs of its headers', async () => {
    let closed!: () => void;
    const connectionClosed = new Promise<void>((r) => (closed = r));
    let headersAt = 0;
    const url = await serve((req, res) => {
      req.socket.on('close', () => closed());
      void readBody(req).then(() => {
        // Never silent for as long as the timeout, never done: undici's silence timeout never fires.
        res.writeHead(200, { 'Content-Length': '100000000', 'Content-Type': 'application/json' });
        res.write('{');
        headersAt = performance.now();
        const timer = setInterval(() => (res.destroyed ? clearInterval(timer) : res.write(' ')), 50);
      });
    });
    const out = await makeClient(url, 500).postTraces({}, 'k');
    // A 2xx not read to its end is no acknowledgement: a network error, retried under the same key.
    expect(out).toMatchObject({ kind: 'network', code: 'ETIMEDOUT' });
    expect(performance.now() - headersAt).toBeGreaterThanOrEqual(490);
    await connectionClosed; // abandoned: the client closed the connection
  });

  it('gives up on an endless 2xx within timeoutMs of its headers and closes its connection: not an acknowledgement', async () => {
    let closed!: () => void;
    const connectionClosed = new Promise<void>((r) => (closed = r));
    const url = await serve((req, res) => {
      req.socket.on('close', () => closed());
      void readBody(req).then(() => {
        res.writeHead(200, { 'Content-Type': 'application/json' }); // chunked, no end
        const timer = setInterval(() => (res.destroyed ? clearInterval(timer) : res.write('x'.repeat(4096))), 5);
      });
    });
    const out = await makeClient(url, 500).postTraces({}, 'k');
    expect(out).toMatchObject({ kind: 'network', code: 'ETIMEDOUT' });
    if (out.kind === 'network') expect(out.error).toMatch(/HTTP 200\) did not end within 500 ms/);
    await connectionClosed;
  });

  it('takes a large 2xx that ends in time as the acknowledgement it is (a service echoing the request), keeping its start', async () => {
    const url = await serve((req, res) => {
      void readBody(req).then(() => res.writeHead(200, { 'Content-Type': 'application/json' }).end(`{"echo":"${'x'.repeat(1024 * 1024)}"}`));
    });
    const out = await makeClient(url, 5000).postTraces({}, 'k');
    expect(out).toMatchObject({ kind: 'response', status: 200 });
    if (out.kind === 'response') expect(out.body.length).toBeLessThanOrEqual(65_536 + 3);
  });

  it('says when a request went twice: a kept-alive connection closed after the server read it, the copy answered 409', async () => {
    const keys = new Set<string>();
    const url = await serve((req, res, nth) => {
      void readBody(req).then(() => {
        const key = String(req.headers['idempotency-key']);
        if (keys.has(key)) return res.writeHead(409).end('{"error":"duplicate Idempotency-Key"}');
        keys.add(key);
        // The second request, on the connection the first left open: read, then the connection dies unanswered.
        if (nth === 2) return req.socket.destroy();
        res.writeHead(200).end('{}');
      });
    });
    const c = makeClient(url);
    const first = await c.postTraces({ n: 1 }, 'a');
    expect(first).toMatchObject({ kind: 'response', status: 200 });
    expect(first).not.toHaveProperty('resent', true);
    expect(await c.postTraces({ n: 2 }, 'b')).toMatchObject({ kind: 'response', status: 409, resent: true });
  });

  it('sends again at once on a new connection when a kept-alive one was closed under the request', async () => {
    const url = await serve((req, res, nth) => {
      // The second request arrives on the connection the first left open: drop it without an
      // answer, as a server does whose idle timeout fired just then.
      if (nth === 2) {
        req.socket.destroy();
        return;
      }
      void readBody(req).then(() => res.writeHead(200).end('{}'));
    });
    const c = makeClient(url);
    expect(await c.postTraces({ n: 1 }, 'a')).toMatchObject({ kind: 'response', status: 200 });
    expect(await c.postTraces({ n: 2 }, 'b')).toMatchObject({ kind: 'response', status: 200 });
  });

  it('does not send twice when a fresh connection fails, and never puts the key in the error', async () => {
    let hits = 0;
    const url = await serve((req) => {
      hits += 1;
      req.socket.destroy();
    });
    const out = await makeClient(url).postTraces({}, 'k');
    expect(out.kind).toBe('network');
    expect(hits).toBe(1);
    expect(JSON.stringify(out)).not.toContain('secret-key-123');
  });

  it('lets a request under way finish when closed (a reload must not cut it off and send it again)', async () => {
    let hits = 0;
    // The second request is answered only when the test says so: it is under way, for sure,
    // while close() runs.
    let answer: (() => void) | undefined;
    let arrived: () => void = () => undefined;
    const underWay = new Promise<void>((r) => (arrived = r));
    const url = await serve((req, res, nth) => {
      hits += 1;
      void readBody(req).then(() => {
        if (nth === 1) return res.writeHead(200).end('{}');
        answer = () => res.writeHead(200).end('{}');
        arrived();
      });
    });
    const c = makeClient(url);
    await c.postTraces({ warm: 1 }, 'w'); // a kept-alive connection to reuse
    const pending = c.postTraces({ n: 1 }, 'k');
    await underWay;
    const closing = c.close();
    answer!();
    await closing;
    expect(await pending).toMatchObject({ kind: 'response', status: 200 });
    expect(hits).toBe(2);
    client = undefined;
  });

  it('sends one request after another on one kept-alive connection', async () => {
    let connections = 0;
    const url = await serve((req, res) => void readBody(req).then(() => res.writeHead(200).end('{}')));
    server!.on('connection', () => (connections += 1));
    const c = makeClient(url);
    for (let i = 0; i < 5; i++) expect(await c.postTraces({ n: i }, `k${i}`)).toMatchObject({ kind: 'response', status: 200 });
    expect(connections).toBe(1);
  });

  it('says when a request is on the wire, before its answer, so the drain builds the next one beside it', async () => {
    // The server answers each request only when the test says so.
    const waiting: Array<() => void> = [];
    let arrived: () => void = () => undefined;
    const url = await serve(
      (req, res) =>
        void readBody(req).then(() => {
          waiting.push(() => res.writeHead(200).end('{}'));
          arrived();
        }),
    );
    const serverHas = (n: number) => new Promise<void>((r) => (arrived = () => waiting.length >= n && r()));
    const c = makeClient(url);
    const events: string[] = [];
    const seen1 = serverHas(1);
    const first = c.postTraces({ n: 1 }, 'k1', undefined, () => events.push('1 written')).then(() => events.push('1 answered'));
    await seen1;
    events.push('1 at the server');
    waiting[0]();
    await first;
    // Again on the kept-alive connection, which undici checks on a later turn before writing.
    let onWire!: () => void;
    const written = new Promise<void>((r) => (onWire = r));
    const seen2 = serverHas(2);
    const second = c.postTraces({ n: 2 }, 'k2', undefined, onWire);
    await written;
    events.push('2 written');
    await seen2;
    waiting[1]();
    expect(await second).toMatchObject({ kind: 'response', status: 200 });
    expect(events).toEqual(['1 written', '1 at the server', '1 answered', '2 written']);
  });

  it('reports a refused connection as a network error', async () => {
    const url = await serve(() => undefined);
    await new Promise<void>((r) => server!.close(() => r()));
    server = undefined;
    const out = await makeClient(url).postTraces({}, 'k');
    expect(out).toMatchObject({ kind: 'network', code: 'ECONNREFUSED' });
  });
});
