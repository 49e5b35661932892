/**
 * The HTTP side of interface E. One POST per call; the caller decides what a status means.
 *
 * Redirects are never followed: the subscription key travels in a header, and a 3xx to
 * another host would hand it over. The key never appears in an error we produce.
 */
import { Agent, request } from 'undici';

export interface ApiClientOptions {
  baseUrl: string;
  milestonePath: string;
  tracePath: string;
  scac: string;
  subscriptionKey: string;
  timeoutMs: number;
  extraFields?: Record<string, string | number | boolean>;
}

export type PostOutcome =
  | { kind: 'response'; status: number; body: string; retryAfter?: string; location?: string; durationMs: number }
  | { kind: 'network'; error: string; code?: string; durationMs: number };

export class ApiClient {
  private readonly dispatcher: Agent;
  private readonly opts: ApiClientOptions;

  constructor(opts: ApiClientOptions) {
    this.opts = opts;
    this.dispatcher = new Agent({
      keepAliveTimeout: 30_000,
      connect: { timeout: Math.min(opts.timeoutMs, 30_000) },
      // No redirect interceptor is installed: undici's request() does not follow 3xx by itself.
    });
  }

  get extraFields(): Record<string, string | number | boolean> {
    return this.opts.extraFields ?? {};
  }

  headers(idempotencyKey?: string): Record<string, string> {
    const h: Record<string, string> = {
      'Ocp-Apim-Subscription-Key': this.opts.subscriptionKey,
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

  postTraces(body: object, idempotencyKey: string, signal?: AbortSignal): Promise<PostOutcome> {
    return this.post(this.opts.tracePath, body, idempotencyKey, signal);
  }

  /** `body` may be an object or an already serialised JSON string. */
  async post(path: string, body: object | string, idempotencyKey?: string, signal?: AbortSignal): Promise<PostOutcome> {
    const started = performance.now();
    const url = new URL(path, this.opts.baseUrl.endsWith('/') ? this.opts.baseUrl : `${this.opts.baseUrl}/`);
    // Join paths the way operators expect: base https://host/api + /rcsc/... -> https://host/api/rcsc/...
    url.pathname = `${new URL(this.opts.baseUrl).pathname.replace(/\/$/, '')}${path}`;
    try {
      const res = await request(url, {
        method: 'POST',
        headers: this.headers(idempotencyKey),
        body: typeof body === 'string' ? body : JSON.stringify(body),
        dispatcher: this.dispatcher,
        signal,
        headersTimeout: this.opts.timeoutMs,
        bodyTimeout: this.opts.timeoutMs,
      });
      const text = await res.body.text();
      const header = (name: string) => {
        const v = res.headers[name];
        return Array.isArray(v) ? v[0] : v;
      };
      return {
        kind: 'response',
        status: res.statusCode,
        body: text.length > 4000 ? `${text.slice(0, 4000)}...` : text,
        retryAfter: header('retry-after'),
        location: header('location'),
        durationMs: performance.now() - started,
      };
    } catch (err) {
      const e = err as Error & { code?: string };
      return { kind: 'network', error: e.message, code: e.code, durationMs: performance.now() - started };
    }
  }

  async close(): Promise<void> {
    await this.dispatcher.close();
  }
}
