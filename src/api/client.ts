/**
 * The HTTP side of interface E. One POST per call; the caller decides what a status means.
 * Sent with undici through one dispatcher per client (./transport.ts: keep-alive, timeouts,
 * proxy, private CA).
 *
 * Redirects are never followed: the subscription key travels in a header, and a 3xx to
 * another host would hand it over (undici's request follows none unless told to). The key
 * never appears in an error we produce.
 */
import { subscribe } from 'node:diagnostics_channel';
import { type Dispatcher, errors, request } from 'undici';
import { compressedBody, type Compression, refusesEncoding } from './compress.js';
import { TlsSessions } from './tls-sessions.js';
import { createDispatcher, redactProxy, type TransportOptions } from './transport.js';
import { USER_AGENT } from '../version.js';

export interface ApiClientOptions extends Omit<TransportOptions, 'timeoutMs' | 'connectTimeoutMs'> {
  baseUrl: string;
  milestonePath: string;
  tracePath: string;
  scac: string;
  subscriptionKey: string;
  /** Giving up on a connection (name lookup, TCP and TLS handshakes) after this long, ms (10 s when not said). */
  connectTimeoutMs?: number;
  /**
   * The answer's headers not there this long after the request began, its body silent this
   * long, or not ended this long after its headers: give up.
   */
  timeoutMs: number;
  extraFields?: Record<string, string | number | boolean>;
  /** api.compress and api.compress_min_bytes: bodies from this size sent gzip-encoded (default: none). */
  compression?: Compression;
  /** Told once when the service refuses compressed bodies and compression is turned off for this client. */
  onCompressionRefused?: (answer: string) => void;
}

/** A request body already serialised: JSON text, or its UTF-8 bytes. */
export type Payload = string | Buffer;

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
      /** Sent twice (see postNow): the service may have read the first copy, so this was a repeat. */
      resent?: boolean;
    }
  | { kind: 'network'; error: string; code?: string; durationMs: number; resent?: boolean };

/**
 * Whether each request went out on a connection that had carried one before: undici tells
 * (on its diagnostics channel) which socket a request's headers were written to, and the
 * Idempotency-Key names the request. Read by the resend rule in postNow.
 */
const requestsOnSocket = new WeakMap<object, number>();
const reusedWatch = new Map<string, boolean>();
/** Callers waiting for their request to be written (post's `onWritten`), by Idempotency-Key. */
const writtenWatch = new Map<string, () => void>();
subscribe('undici:client:sendHeaders', (message) => {
  const { headers, socket } = message as { headers: string; socket: object };
  const n = (requestsOnSocket.get(socket) ?? 0) + 1;
  requestsOnSocket.set(socket, n);
  const key = /\r\nidempotency-key: ([^\r]*)/i.exec(headers)?.[1];
  if (key === undefined) return;
  if (reusedWatch.has(key)) reusedWatch.set(key, n > 1);
  // The body follows in the same call (undici writes a string body with its headers).
  writtenWatch.get(key)?.();
});

/** What is kept of a response body: all of a service's answer for a dead letter, never a 10 MB page. */
export const MAX_BODY_CHARS = 65_536;

export class ApiClient {
  private readonly opts: Omit<ApiClientOptions, 'subscriptionKey'>;
  /**
   * The key in a #private field, not in `opts`: a TypeScript `private` is still an own
   * enumerable property, and `JSON.stringify(client)` or a log line `{ client }` printed it.
   */
  readonly #key: string;
  private dispatcher: Dispatcher | undefined;
  /** The TLS session of each origin, kept across connections and dispatchers. */
  readonly tlsSessions = new TlsSessions();
  /** Requests under way: close() lets them finish (a reload must not cut one off and send it twice). */
  private readonly inFlight = new Set<Promise<PostOutcome>>();
  private closing = false;
  /** Set when the service refused a gzip body (415, or a 400 naming the encoding): uncompressed from then on. */
  private compressionRefused = false;

  constructor(opts: ApiClientOptions) {
    const { subscriptionKey, ...rest } = opts;
    this.opts = rest;
    this.#key = subscriptionKey;
  }

  get extraFields(): Record<string, string | number | boolean> {
    return this.opts.extraFields ?? {};
  }

  private get connectTimeoutMs(): number {
    return this.opts.connectTimeoutMs ?? 10_000;
  }

  /** What the connections run with (for a reload's check): timeouts in ms, the proxy, whether a private CA is trusted. */
  get transport(): { timeoutMs: number; connectTimeoutMs: number; proxy: string | undefined; privateCa: boolean; compress: string; tlsHello: 'lean' | 'node' } {
    const c = this.opts.compression;
    const compress = !c || c.method === 'none' ? 'none' : this.compressionRefused ? 'gzip (refused by the service: off)' : `gzip from ${c.minBytes} B`;
    return {
      timeoutMs: this.opts.timeoutMs,
      connectTimeoutMs: this.connectTimeoutMs,
      proxy: this.opts.proxy && redactProxy(this.opts.proxy),
      privateCa: Boolean(this.opts.ca),
      compress,
      tlsHello: this.opts.tlsHello ?? 'lean',
    };
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
      'User-Agent': USER_AGENT,
    };
    if (idempotencyKey) h['Idempotency-Key'] = idempotencyKey;
    return h;
  }

  postMilestone(body: object, idempotencyKey: string, signal?: AbortSignal): Promise<PostOutcome> {
    return this.post(this.opts.milestonePath, body, idempotencyKey, signal);
  }

  /**
   * `body` may be an object, or JSON already serialised (text, or its UTF-8 bytes).
   * `onWritten` is called when the request is written to the connection (it may be called again if it is sent again).
   */
  postTraces(body: Payload | object, idempotencyKey: string, signal?: AbortSignal, onWritten?: () => void): Promise<PostOutcome> {
    return this.post(this.opts.tracePath, body, idempotencyKey, signal, onWritten);
  }

  /** The URL a path is posted to: base https://host/api + /rcsc/... -> https://host/api/rcsc/... */
  urlFor(path: string): URL {
    const url = new URL(this.opts.baseUrl);
    url.pathname = `${url.pathname.replace(/\/$/, '')}${path}`;
    return url;
  }

  /** `body` may be an object, or JSON already serialised (text, or its UTF-8 bytes). */
  post(path: string, body: Payload | object, idempotencyKey?: string, signal?: AbortSignal, onWritten?: () => void): Promise<PostOutcome> {
    const watched = onWritten !== undefined && idempotencyKey !== undefined && !writtenWatch.has(idempotencyKey);
    if (watched) writtenWatch.set(idempotencyKey, onWritten);
    const p = this.postNow(path, body, idempotencyKey, signal);
    this.inFlight.add(p);
    void p.finally(() => {
      this.inFlight.delete(p);
      if (watched) writtenWatch.delete(idempotencyKey);
    });
    return p;
  }

  private async postNow(path: string, body: Payload | object, idempotencyKey?: string, signal?: AbortSignal): Promise<PostOutcome> {
    const started = performance.now();
    if (this.closing) return { kind: 'network', error: 'client closed', code: 'ECLOSED', durationMs: 0 };
    const payload = typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body);
    try {
      const url = this.urlFor(path);
      if (url.protocol !== 'http:' && url.protocol !== 'https:') throw Object.assign(new Error(`api.base_url: unsupported protocol ${url.protocol}`), { code: 'EPROTO' });
      let outcome: Omit<Extract<PostOutcome, { kind: 'response' }>, 'durationMs'>;
      let resent = false;
      const watch = idempotencyKey !== undefined && !reusedWatch.has(idempotencyKey) ? idempotencyKey : undefined;
      if (watch !== undefined) reusedWatch.set(watch, false);
      try {
        outcome = await this.send(url, payload, idempotencyKey, signal);
      } catch (err) {
        // A kept-alive connection the server closed as we reused it: usually its idle timeout
        // fired just then and the request never arrived, so it goes once more at once, on a
        // new connection, not after a backoff. If the server did read it, the same
        // Idempotency-Key makes the copy harmless, and the outcome says it was `resent`: the
        // answer is then to a repeat (a 409 means the service has it, a 429 does not say the
        // first copy was not taken). A fresh connection that fails is not sent on again (the
        // backoff decides).
        const reused = watch !== undefined && reusedWatch.get(watch) === true;
        if (this.closing || !reused || !(err instanceof errors.SocketError)) throw err;
        resent = true;
        outcome = await this.send(url, payload, idempotencyKey, signal).catch((e: unknown) => {
          throw Object.assign(e as Error, { resent: true });
        });
      } finally {
        if (watch !== undefined) reusedWatch.delete(watch);
      }
      return { ...outcome, durationMs: performance.now() - started, ...(resent ? { resent } : {}) };
    } catch (err) {
      const e = err as Error & { code?: string; resent?: boolean };
      return { kind: 'network', ...this.networkError(e), durationMs: performance.now() - started, ...(e.resent ? { resent: true } : {}) };
    }
  }

  /** undici's errors in the words (and codes) the rest of the agent and its operators read. */
  private networkError(e: Error & { code?: string; cause?: unknown }): { error: string; code?: string } {
    const cause = e.cause as (Error & { code?: string }) | undefined;
    switch (e.code) {
      case 'UND_ERR_CONNECT_TIMEOUT':
        return { error: `could not connect within ${this.connectTimeoutMs} ms`, code: e.code };
      case 'UND_ERR_HEADERS_TIMEOUT':
        return { error: `no answer within ${this.opts.timeoutMs} ms`, code: 'ETIMEDOUT' };
      case 'UND_ERR_BODY_TIMEOUT':
        return { error: `the answer stopped for ${this.opts.timeoutMs} ms`, code: 'ETIMEDOUT' };
      case 'UND_ERR_SOCKET':
        return { error: `connection closed before the answer (${e.message})`, code: 'ECONNRESET' };
    }
    if (e instanceof AnswerCut) return { error: e.message, code: e.code };
    // A proxy that refused the tunnel, or could not reach the service.
    if (e.name === 'RequestAbortedError' && cause) return this.networkError(cause);
    if (/^Proxy response|proxy/i.test(e.message) && !e.code?.startsWith('E')) return { error: `proxy: ${e.message.replace(/\/\/[^@/]*@/g, '//')}`, code: 'EPROXY' };
    const code = e.code ?? cause?.code;
    if (code && TLS_CODES.has(code)) {
      const hint = this.opts.ca ? 'api.ca_file does not hold the CA that signed it' : 'if a proxy or TLS inspection signs it, set api.ca_file to its CA';
      return { error: `TLS: the service's certificate could not be verified (${e.message}); ${hint}`, code };
    }
    const proxy = this.opts.proxy && this.opts.proxy !== 'direct' ? redactProxy(this.opts.proxy) : undefined;
    return { error: proxy ? `${e.message} (through proxy ${proxy})` : e.message, code };
  }

  /**
   * The request, gzip-encoded when api.compress says so; a service that refuses the encoding
   * (415, or a 400 that names it) gets the same JSON again at once, uncompressed, under the
   * same Idempotency-Key, and every later request uncompressed.
   */
  private async send(url: URL, payload: Payload, idempotencyKey: string | undefined, signal: AbortSignal | undefined): Promise<Omit<Extract<PostOutcome, { kind: 'response' }>, 'durationMs'>> {
    const gzipped = this.compressionRefused ? undefined : await compressedBody(payload, this.opts.compression);
    const outcome = await this.sendOnce(url, gzipped ?? payload, gzipped ? { 'Content-Encoding': 'gzip' } : {}, idempotencyKey, signal);
    if (!gzipped || !refusesEncoding(outcome.status, outcome.body) || this.compressionRefused) return outcome;
    this.compressionRefused = true;
    this.opts.onCompressionRefused?.(`HTTP ${outcome.status}${outcome.body ? `: ${outcome.body.replace(/\s+/g, ' ').slice(0, 200)}` : ''}`);
    return this.sendOnce(url, payload, {}, idempotencyKey, signal);
  }

  private async sendOnce(
    url: URL,
    payload: Payload,
    extra: Record<string, string>,
    idempotencyKey: string | undefined,
    signal: AbortSignal | undefined,
  ): Promise<Omit<Extract<PostOutcome, { kind: 'response' }>, 'durationMs'>> {
    this.dispatcher ??= createDispatcher({ ...this.opts, connectTimeoutMs: this.connectTimeoutMs, sessions: this.tlsSessions });
    const res = await request(url, {
      method: 'POST',
      dispatcher: this.dispatcher,
      signal,
      headers: { ...this.#headers(idempotencyKey), ...extra, 'Content-Length': String(typeof payload === 'string' ? Buffer.byteLength(payload) : payload.length) },
      body: payload,
    });
    const { text, cut } = await readAnswer(res.body, this.opts.timeoutMs, res.statusCode);
    if (cut) throw cut;
    const headers: Record<string, string> = {};
    for (const [name, v] of Object.entries(res.headers)) if (v !== undefined) headers[name] = Array.isArray(v) ? v.join(', ') : v;
    const first = (name: string) => {
      const v = res.headers[name];
      return Array.isArray(v) ? v[0] : v;
    };
    return {
      kind: 'response',
      status: res.statusCode,
      body: text,
      retryAfter: first('retry-after'),
      location: first('location'),
      headers,
    };
  }

  /** Let requests under way finish (each bounded by the timeouts), then close the connections. */
  async close(): Promise<void> {
    this.closing = true;
    await Promise.allSettled([...this.inFlight]);
    const d = this.dispatcher;
    this.dispatcher = undefined;
    await d?.close().catch(() => undefined);
  }
}

/** An answer's body given up on: not ended within the time allowed, or an answer that may settle records run past what is kept. */
class AnswerCut extends Error {
  constructor(
    message: string,
    readonly code: string,
  ) {
    super(message);
  }
}

/**
 * An answer's body, its start kept (MAX_BODY_CHARS). Given up on, and its connection closed
 * (undici closes it when a body is destroyed before its end), when it has not ended within
 * `timeoutMs` of the headers: a proxy trickling a byte a second (undici's body timeout only
 * catches silence), an endless body. A 2xx or a 409, which let records leave the buffer, are
 * trusted only read to their end (a service may echo a large request back: read on, the start
 * kept); one given up on is like one whose connection closed mid-body: `cut` says so, and the
 * request goes again under its key. A refusal's status stands with the start of its body:
 * reading stops there.
 */
async function readAnswer(body: Dispatcher.ResponseData['body'], timeoutMs: number, status: number): Promise<{ text: string; cut?: AnswerCut }> {
  let text = '';
  let late = false;
  const timer = setTimeout(() => {
    late = true;
    body.destroy();
  }, timeoutMs);
  const settles = (status >= 200 && status < 300) || status === 409;
  body.setEncoding('utf8');
  try {
    for await (const chunk of body as AsyncIterable<string>) {
      if (text.length <= MAX_BODY_CHARS) text += chunk;
      else if (!settles) break; // destroys the body, and its connection
    }
  } catch (err) {
    if (!late) throw err;
  } finally {
    clearTimeout(timer);
  }
  if (late) return { text, cut: new AnswerCut(`the answer (HTTP ${status}) did not end within ${timeoutMs} ms of its headers`, 'ETIMEDOUT') };
  return { text: text.length > MAX_BODY_CHARS ? `${text.slice(0, MAX_BODY_CHARS)}...` : text };
}

/** Node's codes for a certificate that does not verify. */
const TLS_CODES = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
  'CERT_UNTRUSTED',
  'ERR_TLS_CERT_ALTNAME_INVALID',
]);
