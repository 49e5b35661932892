/**
 * The HTTP side of interface E. One POST per call; the caller decides what a status means.
 *
 * Redirects are never followed: the subscription key travels in a header, and a 3xx to
 * another host would hand it over (node:http never follows one by itself). The key never
 * appears in an error we produce.
 *
 * Built on node:http/https rather than an HTTP library: the agent sends one request at a
 * time, and a library's import alone cost about 10 MB of RSS on a 512 MB device.
 */
import type { Agent as HttpAgent, IncomingMessage } from 'node:http';
import { Agent as PlainAgent, request as plainRequest } from 'node:http';

export interface ApiClientOptions {
  baseUrl: string;
  milestonePath: string;
  tracePath: string;
  scac: string;
  subscriptionKey: string;
  /** No byte sent or received for this long (connect, upload, waiting for the answer, body): give up. */
  timeoutMs: number;
  extraFields?: Record<string, string | number | boolean>;
}

export type PostOutcome =
  | {
      kind: 'response';
      status: number;
      body: string;
      retryAfter?: string;
      location?: string;
      /** The answer's headers, lower-case names (a dead letter keeps them). */
      headers?: Record<string, string>;
      durationMs: number;
    }
  | { kind: 'network'; error: string; code?: string; durationMs: number };

/** What is kept of a response body: all of a service's answer for a dead letter, never a 10 MB page. */
export const MAX_BODY_CHARS = 65_536;

type RequestFn = typeof plainRequest;

export class ApiClient {
  private readonly opts: Omit<ApiClientOptions, 'subscriptionKey'>;
  /**
   * The key in a #private field, not in `opts`: a TypeScript `private` is still an own
   * enumerable property, and `JSON.stringify(client)` or a log line `{ client }` printed it.
   */
  readonly #key: string;
  private transport: Promise<{ agent: HttpAgent; request: RequestFn }> | undefined;
  /** Requests under way: close() lets them finish (a reload must not cut one off and send it twice). */
  private readonly inFlight = new Set<Promise<PostOutcome>>();
  private closing = false;

  constructor(opts: ApiClientOptions) {
    const { subscriptionKey, ...rest } = opts;
    this.opts = rest;
    this.#key = subscriptionKey;
  }

  get extraFields(): Record<string, string | number | boolean> {
    return this.opts.extraFields ?? {};
  }

  get baseUrl(): string {
    return this.opts.baseUrl;
  }

  /** The request headers, the key among them: private, so nothing outside can log or pass them on. */
  #headers(idempotencyKey?: string): Record<string, string> {
    const h: Record<string, string> = {
      'Ocp-Apim-Subscription-Key': this.#key,
      carrierSCAC: this.opts.scac,
      Accept: 'application/json',
      'Content-Type': 'application/json',
    };
    if (idempotencyKey) h['Idempotency-Key'] = idempotencyKey;
    return h;
  }

  postMilestone(body: object, idempotencyKey: string, signal?: AbortSignal): Promise<PostOutcome> {
    return this.post(this.opts.milestonePath, body, idempotencyKey, signal);
  }

  /** `body` may be an object or an already serialised JSON string. */
  postTraces(body: object | string, idempotencyKey: string, signal?: AbortSignal): Promise<PostOutcome> {
    return this.post(this.opts.tracePath, body, idempotencyKey, signal);
  }

  /** The URL a path is posted to: base https://host/api + /rcsc/... -> https://host/api/rcsc/... */
  urlFor(path: string): URL {
    const url = new URL(this.opts.baseUrl);
    url.pathname = `${url.pathname.replace(/\/$/, '')}${path}`;
    return url;
  }

  /** `body` may be an object or an already serialised JSON string. */
  post(path: string, body: object | string, idempotencyKey?: string, signal?: AbortSignal): Promise<PostOutcome> {
    const p = this.postNow(path, body, idempotencyKey, signal);
    this.inFlight.add(p);
    void p.finally(() => this.inFlight.delete(p));
    return p;
  }

  private async postNow(path: string, body: object | string, idempotencyKey?: string, signal?: AbortSignal): Promise<PostOutcome> {
    const started = performance.now();
    if (this.closing) return { kind: 'network', error: 'client closed', code: 'ECLOSED', durationMs: 0 };
    const payload = typeof body === 'string' ? body : JSON.stringify(body);
    try {
      const url = this.urlFor(path);
      const { agent, request } = await this.connection(url);
      let outcome: Omit<Extract<PostOutcome, { kind: 'response' }>, 'durationMs'>;
      try {
        outcome = await this.send(request, agent, url, payload, idempotencyKey, signal);
      } catch (err) {
        // A kept-alive connection the server closed as we reused it: usually its idle timeout
        // fired just then and the request never arrived, so it goes once more at once, on a
        // new connection, not after a backoff. If the server did read it, the same
        // Idempotency-Key makes the copy harmless.
        if (this.closing || !(err as { reusedSocket?: boolean }).reusedSocket || (err as { code?: string }).code !== 'ECONNRESET') throw err;
        outcome = await this.send(request, agent, url, payload, idempotencyKey, signal);
      }
      return { ...outcome, durationMs: performance.now() - started };
    } catch (err) {
      const e = err as Error & { code?: string };
      return { kind: 'network', error: e.message, code: e.code, durationMs: performance.now() - started };
    }
  }

  /** One keep-alive agent per client; TLS is loaded only when the base URL needs it. */
  private connection(url: URL): Promise<{ agent: HttpAgent; request: RequestFn }> {
    this.transport ??= (async () => {
      // Idle connections are closed after 30 s, sooner when the server's Keep-Alive says so.
      const options = { keepAlive: true, maxSockets: 4, timeout: 30_000 };
      if (url.protocol === 'https:') {
        const https = await import('node:https');
        return { agent: new https.Agent(options), request: https.request as RequestFn };
      }
      if (url.protocol !== 'http:') throw new Error(`api.base_url: unsupported protocol ${url.protocol}`);
      return { agent: new PlainAgent(options), request: plainRequest };
    })();
    return this.transport;
  }

  private send(
    request: RequestFn,
    agent: HttpAgent,
    url: URL,
    payload: string,
    idempotencyKey: string | undefined,
    signal: AbortSignal | undefined,
  ): Promise<Omit<Extract<PostOutcome, { kind: 'response' }>, 'durationMs'>> {
    return new Promise((resolve, reject) => {
      const req = request(url, {
        method: 'POST',
        agent,
        signal,
        // Inactivity, not the whole exchange, from the name lookup and connect on: a 2G link
        // may take a minute to upload a chunk while bytes keep moving; a silent peer is
        // given up after timeoutMs.
        timeout: this.opts.timeoutMs,
        headers: { ...this.#headers(idempotencyKey), 'Content-Length': String(Buffer.byteLength(payload)) },
      });
      const fail = (err: Error & { code?: string; reusedSocket?: boolean }) => {
        err.reusedSocket = req.reusedSocket;
        reject(err);
      };
      req.on('timeout', () => {
        req.destroy(Object.assign(new Error(`no traffic for ${this.opts.timeoutMs} ms`), { code: 'ETIMEDOUT' }));
      });
      req.on('error', fail);
      req.on('response', (res: IncomingMessage) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          // Read to the end (so the connection can be reused) but keep only the start.
          if (text.length <= MAX_BODY_CHARS) text += chunk;
        });
        res.on('error', fail);
        res.on('end', () => {
          const header = (name: string) => {
            const v = res.headers[name];
            return Array.isArray(v) ? v[0] : v;
          };
          const headers: Record<string, string> = {};
          for (const [name, v] of Object.entries(res.headers)) if (v !== undefined) headers[name] = Array.isArray(v) ? v.join(', ') : v;
          resolve({
            kind: 'response',
            status: res.statusCode ?? 0,
            body: text.length > MAX_BODY_CHARS ? `${text.slice(0, MAX_BODY_CHARS)}...` : text,
            retryAfter: header('retry-after'),
            location: header('location'),
            headers,
          });
        });
      });
      req.end(payload);
    });
  }

  /** Let requests under way finish (each bounded by timeoutMs), then close the connections. */
  async close(): Promise<void> {
    this.closing = true;
    await Promise.allSettled([...this.inFlight]);
    const t = this.transport;
    this.transport = undefined;
    if (t) (await t.catch(() => undefined))?.agent.destroy();
  }
}
