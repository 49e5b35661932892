/**
 * Who may use the page: a PIN (ui.pin_file) gives a session cookie; five wrong PINs in a row
 * from one client address lock the login for that address for five minutes (anyone else on
 * the cab's Wi-Fi cannot lock the driver out); wrong PINs from many addresses slow every
 * address that sends them (pin-slowing.ts); every form carries its session's CSRF token. Tokens are
 * random and compared in constant time; nothing here is ever rendered but the CSRF token.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { PinSlowing } from './pin-slowing.js';

export const MAX_WRONG_PINS = 5;
export const LOCK_MS = 5 * 60_000;
/** A shift: a driver logs in once a day, not once an hour. */
export const SESSION_MS = 14 * 3_600_000;
const MAX_SESSIONS = 32;
/** Addresses whose wrong PINs are counted: bounded, so a flood of addresses cannot grow it. */
const MAX_CLIENTS = 1024;

/**
 * What a client's wrong PINs count under: its IPv4 address (also when written as IPv6
 * `::ffff:a.b.c.d`), or its IPv6 /64, since a phone picks new addresses in its /64 at will
 * and would otherwise get five more guesses with each.
 */
export function clientKey(address: string | undefined): string {
  const a = (address ?? '').replace(/%.*$/, '').toLowerCase();
  const v4 = /^(?:::ffff:)?(\d+\.\d+\.\d+\.\d+)$/.exec(a);
  if (v4) return v4[1];
  if (!a.includes(':')) return a;
  const [head, tail] = a.split('::');
  const h = head ? head.split(':') : [];
  const t = tail ? tail.split(':') : [];
  const groups = tail === undefined ? h : [...h, ...Array<string>(Math.max(0, 8 - h.length - t.length)).fill('0'), ...t];
  return `${groups
    .slice(0, 4)
    .map((g) => Number.parseInt(g || '0', 16).toString(16))
    .join(':')}::/64`;
}

interface Strikes {
  wrong: number;
  lockedUntilMs: number;
}

/** The PIN in `file`: 4-8 digits, or an Error naming ui.pin_file (its content never in it). */
export function readPin(file: string): string {
  let text: string;
  try {
    text = readFileSync(file, 'utf8').trim();
  } catch (err) {
    throw new Error(`ui.pin_file: ${file}: cannot read (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
  }
  if (!/^\d{4,8}$/.test(text)) throw new Error(`ui.pin_file: ${file}: expected a PIN of 4-8 digits`);
  return text;
}

/** Equal strings, in a time that does not tell how much of a guess was right. */
export function sameSecret(a: string, b: string): boolean {
  // Hashing first gives equal lengths, so the length of the PIN does not leak either.
  const ha = createHash('sha256').update(a).digest();
  const hb = createHash('sha256').update(b).digest();
  return timingSafeEqual(ha, hb);
}

export const token = (): string => randomBytes(24).toString('base64url');

export interface Session {
  id: string;
  csrf: string;
  expiresMs: number;
}

/** Refused: locked (this address), slowed (`slowedForMs`: its PIN was not checked), or a wrong PIN; `slowingStarted`: this wrong PIN began the slowing. */
export type LoginResult = { ok: true; session: Session } | { ok: false; lockedForMs: number; justLocked: boolean; slowedForMs?: number; slowingStarted?: true };

export class Auth {
  private readonly sessions = new Map<string, Session>();
  /** Wrong PINs and locks, by clientKey(). */
  private readonly strikes = new Map<string, Strikes>();

  /** `pin` undefined: no PIN (a loopback page); every request has the one session. */
  constructor(
    private readonly pin: string | undefined,
    private readonly now: () => number = Date.now,
    readonly slowing: PinSlowing = new PinSlowing(),
  ) {}

  get needsPin(): boolean {
    return this.pin !== undefined;
  }

  /** How long the login stays locked for `client` (a clientKey()). */
  lockedForMs(client: string): number {
    return Math.max(0, (this.strikes.get(client)?.lockedUntilMs ?? 0) - this.now());
  }

  login(guess: string, client: string): LoginResult {
    if (this.pin === undefined) return { ok: true, session: this.newSession() };
    const locked = this.lockedForMs(client);
    if (locked > 0) return { ok: false, lockedForMs: locked, justLocked: false };
    // Not checked before its turn: the answer says nothing of the guess, right or wrong.
    const slowedForMs = this.slowing.waitMs(client);
    if (slowedForMs > 0) return { ok: false, lockedForMs: 0, justLocked: false, slowedForMs };
    if (sameSecret(guess, this.pin)) {
      this.strikes.delete(client);
      this.slowing.right(client);
      return { ok: true, session: this.newSession() };
    }
    const wasOn = this.slowing.on;
    this.slowing.wrong(client);
    const started = !wasOn && this.slowing.on ? { slowingStarted: true as const } : {};
    const s = this.strikes.get(client) ?? this.newStrikes(client);
    s.wrong += 1;
    if (s.wrong >= MAX_WRONG_PINS) {
      s.wrong = 0;
      s.lockedUntilMs = this.now() + LOCK_MS;
      return { ok: false, lockedForMs: LOCK_MS, justLocked: true, ...started };
    }
    return { ok: false, lockedForMs: 0, justLocked: false, ...started };
  }

  private newStrikes(client: string): Strikes {
    if (this.strikes.size >= MAX_CLIENTS) {
      // The oldest entry that is not locked goes first; a lock is never lifted to make room.
      const now = this.now();
      const [free] = [...this.strikes].find(([, v]) => v.lockedUntilMs <= now) ?? [this.strikes.keys().next().value!];
      this.strikes.delete(free);
    }
    const s = { wrong: 0, lockedUntilMs: 0 };
    this.strikes.set(client, s);
    return s;
  }

  /** The session a cookie names, if it is still good. */
  session(id: string | undefined): Session | undefined {
    if (!id) return undefined;
    const s = this.sessions.get(id);
    if (!s) return undefined;
    if (s.expiresMs <= this.now()) {
      this.sessions.delete(id);
      return undefined;
    }
    return s;
  }

  logout(id: string | undefined): void {
    if (id) this.sessions.delete(id);
  }

  /** The token a form of `session` must carry back. */
  csrfOk(session: Session, sent: string | undefined): boolean {
    return typeof sent === 'string' && sameSecret(sent, session.csrf);
  }

  private newSession(): Session {
    // A bounded table: the oldest goes first (a phone that never logs out must not grow it).
    if (this.sessions.size >= MAX_SESSIONS) this.sessions.delete(this.sessions.keys().next().value!);
    const s = { id: token(), csrf: token(), expiresMs: this.now() + SESSION_MS };
    this.sessions.set(s.id, s);
    return s;
  }
}
