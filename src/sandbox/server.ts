/**
 * A local stand-in for the receiving side of interface E. It checks the subscription key
 * and the carrierSCAC header, validates bodies with the same schemas the agent uses,
 * records what it accepted, counts duplicates by idempotency key, and injects faults on
 * request, so carriers (and our tests) can rehearse every bad day before a real key exists.
 *
 * Control endpoints (no key; bind to loopback): GET /_sandbox/received, GET /_sandbox/stats,
 * PUT /_sandbox/faults (JSON, merged), POST /_sandbox/reset.
 *
 * By default it accepts what the specification describes; `strict` adds what the deployed
 * service is reported to enforce beyond it (./rules.ts).
 */
import { appendFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { milestoneBodySchema, traceBodySchema, type MilestoneBody, type TraceBody } from '../api/schemas.js';
import { check, problemLine } from '../validation.js';
import { type Faults, NO_FAULTS } from './faults.js';
import { ruleProblems, sandboxRules, type Rules } from './rules.js';
import { countHandshakes, decodeBody, emptyWireStats, type WireStats } from './wire.js';

export { type Faults, NO_FAULTS } from './faults.js';

export interface SandboxOptions {
  key: string;
  scac: string;
  port?: number;
  host?: string;
  milestonePath?: string;
  tracePath?: string;
  faults?: Partial<Faults>;
  /** Append every accepted body as a JSON line to this file. */
  recordFile?: string;
  /** Called for every request with its outcome (for a console feed). */
  onRequest?: (e: SandboxEvent) => void;
  /** Largest body accepted, bytes. */
  maxBodyBytes?: number;
  /**
   * Keep every accepted body in `milestones` and `traces` (default true). False: only count
   * (stats, duplicates by Idempotency-Key and by load and traceId still detected), so a benchmark can
   * send millions of points without the sandbox holding them all.
   */
  keepBodies?: boolean;
  /**
   * Also refuse (400) what the deployed service is reported to refuse: a `dateTime` that is not
   * UTC `YYYY-MM-DDTHH:MM:SSZ`, a body without a top-level `source`, and a `loadNumber` outside
   * `loadNumberPattern` (default: the agent's rule, `^[A-Za-z0-9-]{1,35}$`).
   */
  strict?: boolean;
  /** Regular expression every `loadNumber` must match as a whole; applies with or without `strict`. Invalid: the constructor throws SyntaxError. */
  loadNumberPattern?: string;
  /** Serve HTTPS with this certificate and key (PEM), to rehearse a private CA (api.ca_file). */
  tls?: { cert: string; key: string };
  /** Close a connection idle this long, ms (Node's default: 5 s). */
  idleTimeoutMs?: number;
  /** Accept bodies with Content-Encoding gzip (default true); false answers them 415. */
  gzip?: boolean;
}

export interface SandboxEvent {
  kind: 'milestone' | 'trace' | 'other';
  status: number;
  idempotencyKey?: string;
  duplicate?: boolean;
  body?: MilestoneBody | TraceBody;
  problem?: string;
}

export interface Received<T> {
  at: number;
  idempotencyKey?: string;
  body: T;
  headers: Record<string, string>;
}

export interface SandboxStats {
  requests: number;
  accepted: number;
  unauthorized: number;
  invalid: number;
  faults: { failed: number; dropped: number; throttled: number; forced: number; tooLarge: number; rejected: number };
  duplicateRequests: number;
  duplicateTracePoints: number;
  tracePoints: number;
  wire: WireStats;
}

const emptyStats = (): SandboxStats => ({
  requests: 0,
  accepted: 0,
  unauthorized: 0,
  invalid: 0,
  faults: { failed: 0, dropped: 0, throttled: 0, forced: 0, tooLarge: 0, rejected: 0 },
  duplicateRequests: 0,
  duplicateTracePoints: 0,
  tracePoints: 0,
  wire: emptyWireStats(),
});

export class Sandbox {
  private server: Server | undefined;
  faults: Faults;
  readonly milestones: Received<MilestoneBody>[] = [];
  readonly traces: Received<TraceBody>[] = [];
  stats: SandboxStats = emptyStats();
  private seenKeys = new Set<string>();
  private seenTraceRefs = new Set<string>();
  private readonly milestonePath: string;
  private readonly tracePath: string;
  readonly rules: Rules;
  /**
   * For the bench: a request read whole waits for what this returns before it is handled
   * (undefined: no wait). The bench holds the agent's requests while a reference client
   * posts, so that both are measured in turns over the same seconds.
   */
  gate: ((req: IncomingMessage) => Promise<void> | undefined) | undefined;

  constructor(private readonly opts: SandboxOptions) {
    this.faults = { ...NO_FAULTS, ...opts.faults };
    this.rules = sandboxRules(opts.strict ?? false, opts.loadNumberPattern);
    this.milestonePath = opts.milestonePath ?? '/rcsc/events/v1/loads/milestone-requests';
    this.tracePath = opts.tracePath ?? '/rcsc/events/v1/loads/trace-requests';
  }

  async start(): Promise<{ port: number; url: string }> {
    const handler = (req: IncomingMessage, res: ServerResponse) => {
      this.handle(req, res).catch((err) => {
        if (!res.headersSent) this.json(res, 500, { error: 'sandbox error', detail: (err as Error).message });
      });
    };
    const server = this.opts.tls ? createHttpsServer(this.opts.tls, handler) : createServer(handler);
    if (this.opts.tls) countHandshakes(server as ReturnType<typeof createHttpsServer>, () => this.stats.wire);
    if (this.opts.idleTimeoutMs !== undefined) server.keepAliveTimeout = this.opts.idleTimeoutMs;
    this.server = server;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.opts.port ?? 0, this.opts.host ?? '127.0.0.1', () => resolve());
    });
    return { port: this.port, url: this.url };
  }

  get port(): number {
    // biome-ignore lint/correctness/noUnsafeOptionalChaining: asked only once started; before that, a TypeError is the right answer.
    return (this.server?.address() as AddressInfo).port;
  }

  get url(): string {
    const host = this.opts.host ?? '127.0.0.1';
    return `${this.opts.tls ? 'https' : 'http'}://${host.includes(':') ? `[${host}]` : host}:${this.port}`;
  }

  /** Close the connections that wait idle, as the idle timeout would (the bench's compressed time). */
  closeIdle(): void {
    this.server?.closeIdleConnections();
  }

  async stop(): Promise<void> {
    const s = this.server;
    if (!s) return;
    this.server = undefined;
    s.closeAllConnections();
    await new Promise<void>((resolve) => s.close(() => resolve()));
  }

  setFaults(f: Partial<Faults>): void {
    this.faults = { ...this.faults, ...f };
  }

  reset(): void {
    this.milestones.length = 0;
    this.traces.length = 0;
    this.stats = emptyStats();
    this.seenKeys = new Set();
    this.seenTraceRefs = new Set();
    this.faults = { ...NO_FAULTS };
  }

  private json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
    const text = JSON.stringify(body);
    res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers });
    res.end(text);
  }

  private async readBody(req: IncomingMessage): Promise<Buffer | undefined> {
    const limit = this.opts.maxBodyBytes ?? 10 * 1024 * 1024;
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const c of req) {
      size += (c as Buffer).length;
      if (size > limit) return undefined;
      chunks.push(c as Buffer);
    }
    return Buffer.concat(chunks);
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? '/').split('?')[0];
    if (path.startsWith('/_sandbox/')) return this.control(path, req, res);

    const kind = req.method === 'POST' && path === this.milestonePath ? 'milestone' : req.method === 'POST' && path === this.tracePath ? 'trace' : 'other';
    this.stats.requests += 1;
    const emit = (e: Omit<SandboxEvent, 'kind'>) => this.opts.onRequest?.({ kind, ...e });
    const rawBytes = await this.readBody(req);
    const held = this.gate?.(req);
    if (held) await held;
    const f = this.faults;
    if (f.latencyMs > 0) await new Promise((r) => setTimeout(r, f.latencyMs));

    if (f.dropNext > 0 || (f.dropRate > 0 && Math.random() < f.dropRate)) {
      if (f.dropNext > 0) f.dropNext -= 1;
      this.stats.faults.dropped += 1;
      emit({ status: 0, problem: 'connection dropped (fault)' });
      req.socket.destroy();
      return;
    }
    if (f.forceStatus > 0) {
      this.stats.faults.forced += 1;
      emit({ status: f.forceStatus, problem: 'forced status (fault)' });
      const headers: Record<string, string> = f.forceStatus >= 300 && f.forceStatus < 400 ? { location: f.redirectTo } : {};
      return this.json(res, f.forceStatus, { error: `forced status ${f.forceStatus}` }, headers);
    }
    if (f.portalNext > 0) {
      f.portalNext -= 1;
      this.stats.faults.forced += 1;
      emit({ status: 200, problem: 'a captive portal page (fault)' });
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end('<!DOCTYPE html>\n<html><head><title>Log in</title></head><body><form>Accept the terms to go online</form></body></html>\n');
      return;
    }
    if (f.throttleNext > 0 || (f.throttleEvery > 0 && this.stats.requests % f.throttleEvery === 0)) {
      if (f.throttleNext > 0) f.throttleNext -= 1;
      this.stats.faults.throttled += 1;
      emit({ status: 429, problem: 'throttled (fault)' });
      return this.json(res, 429, { error: 'too many requests' }, { 'retry-after': f.retryAfter });
    }
    if (f.failNext > 0 || (f.failureRate > 0 && Math.random() < f.failureRate)) {
      if (f.failNext > 0) f.failNext -= 1;
      this.stats.faults.failed += 1;
      emit({ status: 503, problem: 'service unavailable (fault)' });
      return this.json(res, 503, { error: 'service unavailable' });
    }

    if (kind === 'other') {
      emit({ status: 404, problem: `no such endpoint: ${req.method} ${path}` });
      return this.json(res, 404, { error: `no such endpoint: ${req.method} ${path}` });
    }
    const key = req.headers['ocp-apim-subscription-key'];
    if (key !== this.opts.key) {
      this.stats.unauthorized += 1;
      const problem = key ? 'invalid subscription key' : 'missing Ocp-Apim-Subscription-Key header';
      emit({ status: 401, problem });
      return this.json(res, 401, { error: problem });
    }
    const scac = req.headers.carrierscac;
    if (scac !== this.opts.scac) {
      this.stats.unauthorized += 1;
      const problem = scac ? `carrierSCAC ${String(scac)} is not allowed for this key` : 'missing carrierSCAC header';
      emit({ status: 403, problem });
      return this.json(res, 403, { error: problem });
    }
    if (!String(req.headers.accept ?? '').includes('application/json')) {
      emit({ status: 406, problem: 'Accept must include application/json' });
      return this.json(res, 406, { error: 'Accept must include application/json' });
    }
    if (!String(req.headers['content-type'] ?? '').startsWith('application/json')) {
      emit({ status: 415, problem: 'Content-Type must be application/json' });
      return this.json(res, 415, { error: 'Content-Type must be application/json' });
    }
    if (rawBytes === undefined) {
      this.stats.faults.tooLarge += 1;
      emit({ status: 413, problem: 'body too large' });
      return this.json(res, 413, { error: 'body too large' });
    }
    const decoded = decodeBody(rawBytes, req.headers['content-encoding'], this.opts.gzip ?? true, this.opts.maxBodyBytes ?? 10 * 1024 * 1024);
    if ('status' in decoded) {
      emit({ status: decoded.status, problem: decoded.error });
      return this.json(res, decoded.status, { error: decoded.error }, decoded.status === 415 ? { 'accept-encoding': 'identity' } : {});
    }
    const raw = decoded.text;
    this.stats.wire.bodyBytes += rawBytes.length;
    this.stats.wire.jsonBytes += Buffer.byteLength(raw);
    let data: unknown;
    try {
      data = JSON.parse(raw);
    } catch (err) {
      this.stats.invalid += 1;
      emit({ status: 400, problem: `body is not JSON: ${(err as Error).message}` });
      return this.json(res, 400, { error: 'body is not JSON', problems: [(err as Error).message] });
    }
    // A refused request's event carries what was sent too, so a test can tell which records it held.
    const sent = { body: data as MilestoneBody | TraceBody, idempotencyKey: typeof req.headers['idempotency-key'] === 'string' ? req.headers['idempotency-key'] : undefined };
    const schema = kind === 'milestone' ? milestoneBodySchema : traceBodySchema;
    const parsed = check(schema, data);
    // Every problem in one answer, so a sender fixes them in one go; a field the schema
    // already refused is not named twice.
    const schemaProblems = parsed.success ? [] : parsed.problems;
    const schemaPaths = new Set(schemaProblems.map((p) => p.path));
    const problems = [...schemaProblems, ...ruleProblems(kind, data, this.rules).filter((p) => !schemaPaths.has(p.path))].map(problemLine);
    if (!parsed.success || problems.length > 0) {
      this.stats.invalid += 1;
      emit({ status: 400, problem: problems.join('; '), ...sent });
      return this.json(res, 400, { error: 'invalid body', problems });
    }
    const body = parsed.data as MilestoneBody | TraceBody;
    if (f.rejectLoads.includes(body.loadNumber)) {
      this.stats.faults.rejected += 1;
      emit({ status: 400, problem: `loadNumber ${body.loadNumber} refused (fault)`, ...sent });
      return this.json(res, 400, { error: 'refused', problems: [`loadNumber: ${body.loadNumber} is not a load of this carrier`] });
    }
    if (kind === 'trace') {
      const tb = body as TraceBody;
      if (f.maxTracesPerRequest > 0 && tb.traces.length > f.maxTracesPerRequest) {
        this.stats.faults.tooLarge += 1;
        emit({ status: 413, problem: `${tb.traces.length} traces > ${f.maxTracesPerRequest}`, ...sent });
        return this.json(res, 413, { error: `at most ${f.maxTracesPerRequest} traces per request` });
      }
      if (f.rejectTraceRefs.length > 0) {
        const bad = tb.traces.findIndex((t) => t.references?.some((r) => f.rejectTraceRefs.includes(r.value)));
        if (bad >= 0) {
          this.stats.faults.rejected += 1;
          // Named by its reference too, as a service that checks a point says which: two refused
          // points in two halves of a request are two answers, not one refusal of the request.
          const ref = tb.traces[bad].references?.find((r) => f.rejectTraceRefs.includes(r.value))?.value;
          emit({ status: 400, problem: `traces[${bad}] refused (fault)`, ...sent });
          return this.json(res, 400, { error: 'refused', problems: [f.rejectUnnamed ? 'a trace was refused by the service' : `traces[${bad}] (${ref}): refused by the service`] });
        }
      }
    }

    const idem = typeof req.headers['idempotency-key'] === 'string' ? req.headers['idempotency-key'] : undefined;
    const duplicate = idem !== undefined && this.seenKeys.has(idem);
    if (idem) this.seenKeys.add(idem);
    if (duplicate) this.stats.duplicateRequests += 1;
    const keep = this.opts.keepBodies !== false;
    const record = keep || this.opts.recordFile ? { at: Date.now(), idempotencyKey: idem, body, headers: this.recordedHeaders(req) } : undefined;
    if (kind === 'milestone') {
      if (keep) this.milestones.push(record as Received<MilestoneBody>);
    } else {
      const tb = body as TraceBody;
      if (keep) this.traces.push(record as Received<TraceBody>);
      this.stats.tracePoints += tb.traces.length;
      for (const t of tb.traces) {
        const ref = t.references?.find((r) => r.name === 'traceId')?.value;
        if (!ref) continue;
        // A point of a load: the same position in the requests of two loads on one truck is
        // one point for each load, not a duplicate.
        const point = `${tb.loadNumber}\n${ref}`;
        if (this.seenTraceRefs.has(point)) this.stats.duplicateTracePoints += 1;
        this.seenTraceRefs.add(point);
      }
    }
    this.stats.accepted += 1;
    if (this.opts.recordFile) appendFileSync(this.opts.recordFile, `${JSON.stringify({ kind, ...record })}\n`);
    if (f.loseResponseNext > 0) {
      f.loseResponseNext -= 1;
      this.stats.faults.dropped += 1;
      emit({ status: 0, idempotencyKey: idem, duplicate, body, problem: 'accepted, then the answer was lost (fault)' });
      req.socket.destroy();
      return;
    }
    emit({ status: 200, idempotencyKey: idem, duplicate, body });
    return this.json(res, 200, { status: 'accepted', duplicate });
  }

  /** The request's headers as recorded, without the key. */
  private recordedHeaders(req: IncomingMessage): Record<string, string> {
    return Object.fromEntries(
      Object.entries(req.headers)
        .filter(([k]) => k !== 'ocp-apim-subscription-key')
        .map(([k, v]) => [k, Array.isArray(v) ? v.join(', ') : String(v)]),
    );
  }

  private async control(path: string, req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (path === '/_sandbox/stats' && req.method === 'GET') return this.json(res, 200, this.stats);
    if (path === '/_sandbox/received' && req.method === 'GET') {
      return this.json(res, 200, { stats: this.stats, milestones: this.milestones, traces: this.traces });
    }
    if (path === '/_sandbox/faults' && req.method === 'GET') return this.json(res, 200, this.faults);
    if (path === '/_sandbox/faults' && (req.method === 'PUT' || req.method === 'POST')) {
      const raw = await this.readBody(req);
      try {
        const f = JSON.parse(raw?.toString('utf8') ?? '{}') as Partial<Faults>;
        const unknown = Object.keys(f).filter((k) => !(k in NO_FAULTS));
        if (unknown.length) return this.json(res, 400, { error: `unknown fault ${unknown.join(', ')}`, known: Object.keys(NO_FAULTS) });
        this.setFaults(f);
        return this.json(res, 200, this.faults);
      } catch (err) {
        return this.json(res, 400, { error: (err as Error).message });
      }
    }
    if (path === '/_sandbox/reset' && req.method === 'POST') {
      this.reset();
      return this.json(res, 200, { status: 'reset' });
    }
    return this.json(res, 404, { error: `no such control endpoint: ${req.method} ${path}` });
  }
}
