/**
 * Who may use the page: a PIN (ui.pin_file) gives a session cookie; five wrong PINs in a row
 * lock the login for five minutes; every form carries its session's CSRF token. Tokens are
 * random and compared in constant time; nothing here is ever rendered but the CSRF token.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';

export const MAX_WRONG_PINS = 5;
export const LOCK_MS = 5 * 60_000;
/** A shift: a driver logs in once a day, not once an hour. */
export const SESSION_MS = 14 * 3_600_000;
const MAX_SESSIONS = 32;

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

export type LoginResult = { ok: true; session: Session } | { ok: false; lockedForMs: number; justLocked: boolean };

export class Auth {
  private readonly sessions = new Map<string, Session>();
  private wrong = 0;
  private lockedUntilMs = 0;

  /** `pin` undefined: no PIN (a loopback page); every request has the one session. */
  constructor(
    private readonly pin: string | undefined,
    private readonly now: () => number = Date.now,
  ) {}

  get needsPin(): boolean {
    return this.pin !== undefined;
  }

  lockedForMs(): number {
    return Math.max(0, this.lockedUntilMs - this.now());
  }

  login(guess: string): LoginResult {
    if (this.pin === undefined) return { ok: true, session: this.newSession() };
    const locked = this.lockedForMs();
    if (locked > 0) return { ok: false, lockedForMs: locked, justLocked: false };
    if (sameSecret(guess, this.pin)) {
      this.wrong = 0;
      return { ok: true, session: this.newSession() };
    }
    this.wrong += 1;
    if (this.wrong >= MAX_WRONG_PINS) {
      this.wrong = 0;
      this.lockedUntilMs = this.now() + LOCK_MS;
      return { ok: false, lockedForMs: LOCK_MS, justLocked: true };
    }
    return { ok: false, lockedForMs: 0, justLocked: false };
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
