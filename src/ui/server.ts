/**
 * The driver's page over HTTP or HTTPS (node:http, no framework): routes, the headers every
 * answer carries (a CSP with no inline script, no framing, no caching), the session cookie,
 * CSRF and origin checks on every POST, request bodies capped, and the SSE stream.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { type ActionForm, eventName, perform } from './actions.js';
import { CSS, JS } from './assets.js';
import { Auth, clientKey, type Session, sameSecret, token } from './auth.js';
import { liveEvent } from './events.js';
import { confirmPage, type Look, loginPage, mainPage } from './html.js';
import { type Lang, pickLanguage, translator, waitWords } from './i18n.js';
import { isLoopback, parseListen } from './listen.js';
import { driverView, LinkWatch, nextStopOf, stopZone, type UiHost, wallClock } from './view.js';
import { ACTIONS, type Action } from './actions.js';
import { KeptWarnings, pageWarning } from './warnings.js';

/** A login or a milestone form is a few hundred bytes; anything much bigger is not ours. */
export const MAX_BODY_BYTES = 8192;
const SSE_TICK_MS = 1000;
const SESSION_COOKIE = 'ta_session';
const LOGIN_COOKIE = 'ta_login';
/** The high-contrast theme's switch: a look, not a secret, so no session needed (the login page has it too). */
const THEME_COOKIE = 'ta_theme';

const SECURITY_HEADERS = {
  'content-security-policy': "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  // Not no-referrer: Chromium then sends "Origin: null" with the page's own forms.
  'referrer-policy': 'same-origin',
  'cache-control': 'no-store',
};

export interface UiServerOptions {
  listen: string;
  pin: string | undefined;
  tls?: { cert: Buffer; key: Buffer };
  language?: Lang;
}

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

function cookies(req: IncomingMessage): Record<string, string> {
  const out: Record<string, string> = {};
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const i = part.indexOf('=');
    if (i > 0) out[part.slice(0, i).trim()] = part.slice(i + 1).trim();
  }
  return out;
}

async function readForm(req: IncomingMessage): Promise<URLSearchParams> {
  if (!/^application\/x-www-form-urlencoded\b/i.test(req.headers['content-type'] ?? '')) throw new HttpError(415, 'expected a form');
  const declared = Number(req.headers['content-length'] ?? 0);
  if (declared > MAX_BODY_BYTES) throw new HttpError(413, 'request body too large');
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY_BYTES) throw new HttpError(413, 'request body too large');
    chunks.push(chunk as Buffer);
  }
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

/**
 * The login form's token: the one its cookie holds already, else a new one. A second page
 * load (another tab, the browser's favicon request) must not make the first form stale.
 */
function loginToken(jar: Record<string, string>): string {
  const had = jar[LOGIN_COOKIE];
  return had && /^[A-Za-z0-9_-]{32}$/.test(had) ? had : token();
}

export class UiServer {
  private server: Server | undefined;
  readonly auth: Auth;
  private readonly link = new LinkWatch();
  /** What the rules warned of a milestone this page recorded, for the page after the redirect. */
  private readonly warned = new KeptWarnings();
  private readonly streams = new Set<{ res: ServerResponse; lang: Lang; last: string; session: string }>();
  private tick: NodeJS.Timeout | undefined;
  port: number | undefined;

  constructor(
    private readonly host: UiHost,
    private readonly opts: UiServerOptions,
    private readonly log: Logger,
  ) {
    this.auth = new Auth(opts.pin);
  }

  get listen(): string {
    return this.opts.listen;
  }

  get language(): Lang | undefined {
    return this.opts.language;
  }

  get tls(): boolean {
    return this.opts.tls !== undefined;
  }

  async start(): Promise<number> {
    const { host, port } = parseListen(this.opts.listen);
    const handler = (req: IncomingMessage, res: ServerResponse) => {
      this.handle(req, res).catch((err) => {
        const status = err instanceof HttpError ? err.status : 500;
        if (status === 500) this.log.error({ err: (err as Error).message, url: req.url }, 'driver page: request failed');
        if (!res.headersSent) {
          res.writeHead(status, { ...SECURITY_HEADERS, 'content-type': 'text/plain; charset=utf-8', connection: 'close' });
          res.end(`${(err as Error).message}\n`);
        } else res.destroy();
      });
    };
    const server = this.opts.tls ? createHttpsServer({ cert: this.opts.tls.cert, key: this.opts.tls.key }, handler) : createServer(handler);
    server.headersTimeout = 10_000;
    server.requestTimeout = 30_000;
    this.server = server;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => resolve());
    });
    this.port = (server.address() as AddressInfo).port;
    return this.port;
  }

  async stop(): Promise<void> {
    clearInterval(this.tick);
    this.tick = undefined;
    for (const s of this.streams) s.res.end();
    this.streams.clear();
    const s = this.server;
    this.server = undefined;
    if (!s) return;
    s.closeAllConnections();
    await new Promise<void>((r) => s.close(() => r()));
  }

  private lang(req: IncomingMessage): Lang {
    return pickLanguage(this.opts.language, req.headers['accept-language']);
  }

  private cookie(name: string, value: string, maxAgeS?: number): string {
    return `${name}=${value}; Path=/; HttpOnly; SameSite=Strict${this.tls ? '; Secure' : ''}${maxAgeS === undefined ? '' : `; Max-Age=${maxAgeS}`}`;
  }

  private send(res: ServerResponse, status: number, type: string, body: string, headers: Record<string, string | string[]> = {}): void {
    res.writeHead(status, { ...SECURITY_HEADERS, 'content-type': type, ...headers });
    res.end(body);
  }

  private redirect(res: ServerResponse, to: string, headers: Record<string, string | string[]> = {}): void {
    res.writeHead(303, { ...SECURITY_HEADERS, location: to, ...headers });
    res.end();
  }

  /**
   * A POST must come from this page: a browser names the origin of a cross-site form, and it
   * must be this server's own (the CSRF token is the check that does not rely on the browser).
   */
  private checkOrigin(req: IncomingMessage): void {
    const origin = req.headers.origin;
    if (origin === undefined) return;
    const own = `${this.tls ? 'https' : 'http'}://${req.headers.host}`;
    if (origin !== own) throw new HttpError(403, 'cross-site request refused');
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://page');
    const path = url.pathname;
    if (req.method === 'GET' && path === '/page.css') return this.send(res, 200, 'text/css; charset=utf-8', CSS, { 'cache-control': 'max-age=3600' });
    if (req.method === 'GET' && path === '/live.js') return this.send(res, 200, 'text/javascript; charset=utf-8', JS, { 'cache-control': 'max-age=3600' });
    // A page without a PIN answers only to its loopback names: a site that rebinds its own
    // name to 127.0.0.1 (DNS rebinding) gets nothing to read, no token to post with.
    if (!this.auth.needsPin && !isLoopback(req.headers.host ?? '')) throw new HttpError(403, 'this page answers only to a loopback address');
    const lang = this.lang(req);
    const t = translator(lang);
    const jar = cookies(req);
    const look: Look = { lang, sun: jar[THEME_COOKIE] === 'sun' };
    if (req.method === 'GET' && path === '/theme') {
      return this.redirect(res, '/', { 'set-cookie': look.sun ? this.cookie(THEME_COOKIE, '', 0) : this.cookie(THEME_COOKIE, 'sun', 365 * 86_400) });
    }
    let session = this.auth.session(jar[SESSION_COOKIE]);
    const setCookie: string[] = [];
    // A page with no PIN (loopback only): a session all the same, for its CSRF token.
    if (!session && !this.auth.needsPin && req.method === 'GET') {
      const r = this.auth.login('', '');
      if (r.ok) {
        session = r.session;
        setCookie.push(this.cookie(SESSION_COOKIE, session.id));
      }
    }
    if (req.method === 'POST') this.checkOrigin(req);
    if (path === '/login' && req.method === 'POST') return this.login(req, res, jar, look);
    if (!session) {
      // A form sent after the session ended (a restart, a shift later): the login form, saying
      // what became of it, not a bare 401.
      if (req.method === 'POST' && path === '/milestone') return this.loginAgain(res, jar, look, 401, t('sessionEnded'));
      // The live stream of a page open across a restart or a log out: told to reload (a 401
      // would close it for good, and leave the page showing its last state as if live).
      if (req.method === 'GET' && path === '/events') {
        res.writeHead(200, { ...SECURITY_HEADERS, 'content-type': 'text/event-stream; charset=utf-8' });
        res.end('data: {"reload":true}\n\n');
        return;
      }
      if (req.method !== 'GET' || path !== '/') {
        if (req.method === 'GET' && (path === '/confirm' || path === '/milestone')) return this.redirect(res, '/');
        throw new HttpError(401, 'log in first');
      }
      const client = clientKey(req.socket.remoteAddress);
      const locked = this.auth.lockedForMs(client);
      if (locked > 0) return this.loginAgain(res, jar, look, 429, t('locked', { min: Math.ceil(locked / 60_000) }));
      const slowed = this.auth.needsPin ? this.auth.slowing.waitMs(client) : 0;
      if (slowed > 0) return this.loginAgain(res, jar, look, 429, t('slowed', { wait: waitWords(slowed) }), { 'retry-after': String(Math.ceil(slowed / 1000)) });
      return this.loginAgain(res, jar, look, 200, undefined);
    }
    const headers: Record<string, string | string[]> = setCookie.length ? { 'set-cookie': setCookie } : {};
    if (req.method === 'GET' && path === '/') return this.page(res, look, session, url, headers);
    if (req.method === 'GET' && path === '/confirm') return this.confirm(res, look, session, url, headers);
    if (req.method === 'GET' && path === '/events') return this.events(req, res, lang, session);
    if (req.method === 'POST') {
      const form = await readForm(req);
      if (!this.auth.csrfOk(session, form.get('_csrf') ?? undefined)) throw new HttpError(403, t('badRequest'));
      if (path === '/logout') {
        this.auth.logout(session.id);
        return this.redirect(res, '/', { 'set-cookie': this.cookie(SESSION_COOKIE, '', 0) });
      }
      if (path === '/milestone') return this.milestone(res, look, session, form);
    }
    throw new HttpError(404, 'not found');
  }

  private async login(req: IncomingMessage, res: ServerResponse, jar: Record<string, string>, look: Look): Promise<void> {
    const t = translator(look.lang);
    const form = await readForm(req);
    const sent = form.get('_csrf') ?? '';
    // The login form's token is the one its cookie holds (set when the form was served).
    if (!jar[LOGIN_COOKIE] || !sameSecret(sent, jar[LOGIN_COOKIE])) throw new HttpError(403, t('badRequest'));
    const client = clientKey(req.socket.remoteAddress);
    const r = this.auth.login(form.get('pin') ?? '', client);
    if (r.ok) {
      this.log.info({ remote: req.socket.remoteAddress }, 'driver page: logged in');
      return this.redirect(res, '/', { 'set-cookie': [this.cookie(SESSION_COOKIE, r.session.id), this.cookie(LOGIN_COOKIE, '', 0)] });
    }
    if (r.slowedForMs) {
      // Not logged one by one: a guesser's every try would be a line.
      return this.loginAgain(res, jar, look, 429, t('slowed', { wait: waitWords(r.slowedForMs) }), { 'retry-after': String(Math.ceil(r.slowedForMs / 1000)) });
    }
    if (r.justLocked) this.log.warn({ remote: req.socket.remoteAddress, client, lockedS: r.lockedForMs / 1000 }, 'driver page: 5 wrong PINs; login locked for this address');
    else this.log.info({ remote: req.socket.remoteAddress }, 'driver page: wrong PIN');
    if (r.slowingStarted) this.log.warn({ recentWrong: Math.round(this.auth.slowing.recentWrong()) }, 'driver page: many wrong PINs; each address that sent one now waits before its next is checked');
    const error = r.lockedForMs > 0 ? t('locked', { min: Math.ceil(r.lockedForMs / 60_000) }) : t('wrongPin');
    return this.loginAgain(res, jar, look, r.lockedForMs > 0 ? 429 : 401, error);
  }

  /** The login form, with its token in its cookie. */
  private loginAgain(res: ServerResponse, jar: Record<string, string>, look: Look, status: number, error: string | undefined, headers: Record<string, string> = {}): void {
    const csrf = loginToken(jar);
    this.send(res, status, 'text/html; charset=utf-8', loginPage(translator(look.lang), look, csrf, error), { ...headers, 'set-cookie': this.cookie(LOGIN_COOKIE, csrf) });
  }

  private page(res: ServerResponse, look: Look, session: Session, url: URL, headers: Record<string, string | string[]>): void {
    const t = translator(look.lang);
    const view = driverView(this.host, this.link);
    const saved = url.searchParams.get('saved');
    let flash: { ok?: string; warnings?: string[] } | undefined;
    if (saved) {
      for (const l of view.loads) {
        const m = this.host.store.listMilestones(l.loadNumber).find((x) => String(x.id) === saved);
        if (m) flash = { ok: t('saved', { what: `${eventName(m.code, look.lang)}, ${l.loadNumber}, ${wallClock(m.body.time)}` }), warnings: this.warned.of(session.id, m.id).map((w) => pageWarning(w, t)) };
      }
    }
    this.send(res, 200, 'text/html; charset=utf-8', mainPage(t, look, view, this.host.config, session.csrf, flash), headers);
  }

  private stopOf(loadNumber: string, stop: string | null) {
    const load = this.host.store.getLoad(loadNumber);
    if (!load || load.endedMs !== null) return undefined;
    const s = load.stops.find((x) => String(x.sequence) === stop);
    const next = nextStopOf(load);
    return s && next && s.sequence === next.sequence ? next : s ? { ...s, zone: stopZone(s) } : undefined;
  }

  private confirm(res: ServerResponse, look: Look, session: Session, url: URL, headers: Record<string, string | string[]>): void {
    const t = translator(look.lang);
    const load = url.searchParams.get('load') ?? '';
    const action = url.searchParams.get('action') ?? '';
    const stop = this.stopOf(load, url.searchParams.get('stop'));
    if (!stop || !(ACTIONS as readonly string[]).includes(action)) throw new HttpError(404, 'no such load, stop or action');
    // The form's own reference: sent twice (a second tap), it records once.
    const ref = randomUUID();
    this.send(res, 200, 'text/html; charset=utf-8', confirmPage(t, look, this.host.config, { load, stop, action: action as Action, csrf: session.csrf, ref }), headers);
  }

  private milestone(res: ServerResponse, look: Look, session: Session, form: URLSearchParams): void {
    const t = translator(look.lang);
    const f: ActionForm = {
      load: form.get('load') ?? '',
      stop: form.get('stop') ?? '',
      action: form.get('action') ?? '',
      reason: form.get('reason') ?? undefined,
      time: form.get('time') ?? undefined,
      ref: form.get('_form') ?? undefined,
    };
    const r = perform(this.host, f, this.log, look.lang);
    // Committed before this answer: the page that follows says so.
    if (r.ok) {
      this.warned.keep(session.id, r.id, r.warnings);
      this.redirect(res, `/?saved=${r.id}`);
      return;
    }
    if (r.gone) {
      this.send(res, r.status, 'text/html; charset=utf-8', mainPage(t, look, driverView(this.host, this.link), this.host.config, session.csrf, { error: r.message }));
      return;
    }
    const stop = this.stopOf(f.load, f.stop);
    if (!stop || !(ACTIONS as readonly string[]).includes(f.action)) throw new HttpError(422, r.message);
    // Nothing was written: the same form (its reference too) again, with what was typed.
    const page = confirmPage(t, look, this.host.config, { load: f.load, stop, action: f.action as Action, csrf: session.csrf, error: r.message, reason: f.reason, time: f.time, ref: f.ref });
    this.send(res, r.status, 'text/html; charset=utf-8', page);
  }

  /** Server-Sent Events: what changed on the page (link line, milestone states), once a second while a client listens. */
  private events(req: IncomingMessage, res: ServerResponse, lang: Lang, session: Session): void {
    res.writeHead(200, { ...SECURITY_HEADERS, 'content-type': 'text/event-stream; charset=utf-8', connection: 'keep-alive' });
    res.write('retry: 3000\n\n');
    const stream = { res, lang, last: '', session: session.id };
    this.streams.add(stream);
    req.on('close', () => {
      this.streams.delete(stream);
      if (this.streams.size === 0) {
        clearInterval(this.tick);
        this.tick = undefined;
      }
    });
    this.push();
    this.tick ??= setInterval(() => this.push(), SSE_TICK_MS);
  }

  private push(): void {
    if (this.streams.size === 0) return;
    // A stream lives no longer than its session (logged out, expired): the tab left open
    // reconnects, is refused, and shows the login page.
    for (const s of this.streams) {
      if (this.auth.session(s.session)) continue;
      this.streams.delete(s);
      s.res.end();
    }
    if (this.streams.size === 0) {
      clearInterval(this.tick);
      this.tick = undefined;
      return;
    }
    try {
      const view = driverView(this.host, this.link);
      for (const s of this.streams) {
        const data = liveEvent(translator(s.lang), view);
        if (data === s.last) continue;
        s.last = data;
        s.res.write(`data: ${data}\n\n`);
      }
    } catch (err) {
      this.log.warn({ err: (err as Error).message }, 'driver page: live update failed');
    }
  }
}
