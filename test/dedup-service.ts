/**
 * A service on node:http, port 0, that deduplicates by Idempotency-Key as interface E's does: a
 * request whose key it has taken is answered 409. A plan can make it misbehave for a request:
 * take it and drop the connection unanswered, take it and trickle the answer's body forever,
 * or answer a status without taking it. Every request is logged with its key and points.
 */
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

export interface Got {
  nth: number;
  at: number;
  key: string;
  kind: 'trace' | 'milestone';
  /** Reading ids of a trace request's points (their traceId `dev-<id>`). */
  points: number[];
  code?: string;
  answer: number | 'dropped' | 'trickled';
  /** When the connection of this request closed (set for a dropped or trickled one). */
  closedAt?: number;
}

/** `take`: 200; `drop`: taken, the connection closed unanswered; `trickle`: taken, 200 whose body never ends; a number: that status, not taken. */
export type Act = 'take' | 'drop' | 'trickle' | number;

export interface DedupService {
  url: string;
  got: Got[];
  keys: Set<string>;
  close: () => Promise<void>;
}

/** `plan` says what to do with a request (undefined: deduplicate, else take); `onRequest` is told of each once it is answered. */
export async function dedupService(plan: (g: Got) => Act | undefined, onRequest?: (g: Got) => void): Promise<DedupService> {
  const got: Got[] = [];
  const keys = new Set<string>();
  const sockets = new Set<Socket>();
  const timers = new Set<NodeJS.Timeout>();
  const server: Server = createServer((req, res) => {
    let text = '';
    req.on('data', (d: Buffer) => (text += d.toString()));
    req.on('end', () => {
      const body = JSON.parse(text || '{}') as { eventCode?: string; traces?: Array<{ references?: Array<{ value: string }> }> };
      const g: Got = {
        nth: got.length + 1,
        at: performance.now(),
        key: String(req.headers['idempotency-key']),
        kind: body.traces ? 'trace' : 'milestone',
        points: (body.traces ?? []).map((t) => Number(t.references?.[0]?.value.split('-')[1])),
        code: body.eventCode,
        answer: 200,
      };
      got.push(g);
      const act = plan(g) ?? (keys.has(g.key) ? 409 : 'take');
      if (act === 'drop' || act === 'trickle') {
        keys.add(g.key);
        req.socket.on('close', () => (g.closedAt = performance.now()));
      }
      if (act === 'drop') {
        g.answer = 'dropped';
        req.socket.destroy();
      } else if (act === 'trickle') {
        // Headers, then a byte every 100 ms: never silent for long, never done.
        g.answer = 'trickled';
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': '100000000' });
        res.write('{');
        const timer = setInterval(() => (res.destroyed ? clearInterval(timer) : res.write(' ')), 100);
        timers.add(timer);
      } else if (act === 'take') {
        keys.add(g.key);
        res.writeHead(200, { 'content-type': 'application/json' }).end(`{"correlationId":"c${g.nth}"}`);
      } else {
        g.answer = act;
        res.writeHead(act, { 'content-type': 'application/json' }).end(act === 409 ? '{"error":"duplicate Idempotency-Key"}' : '{"error":"busy"}');
      }
      onRequest?.(g);
    });
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    got,
    keys,
    close: () => {
      for (const t of timers) clearInterval(t);
      for (const s of sockets) s.destroy();
      return new Promise((r) => server.close(() => r()));
    },
  };
}
