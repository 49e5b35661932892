/**
 * TLS sessions kept per origin, so each push after the first resumes (TLS 1.3 ticket or 1.2
 * session) instead of a full handshake: on a cellular link that is the service's certificate
 * chain, some 4-5 KB, not sent again every 15 minutes.
 *
 * undici keeps sessions itself, but through a WeakRef: a garbage collection between two
 * pushes (a daemon at work collects many times in 15 minutes) loses them, and every push made
 * a full handshake. Here they are held strongly, one per origin (the latest the server gave).
 *
 * Kept in memory only, never on disk: a ticket is a key to the session (whoever holds it
 * resumes as this device; with TLS 1.2 it protects the traffic of that session), a file on
 * the SD card would be written after every handshake, and what a restart loses is one full
 * handshake, at most one per start, which the service's ticket lifetime (often hours) would
 * soon impose anyway.
 */
import { buildConnector } from 'undici';

export type TlsOptions = buildConnector.BuildOptions;

export class TlsSessions {
  private readonly sessions = new Map<string, Buffer>();

  /** An undici `connect` function that offers the origin's session and keeps the next one. */
  connector(tls: TlsOptions): buildConnector.connector {
    return (opts, callback) => {
      const origin = `${opts.protocol}//${opts.hostname}:${opts.port}`;
      const session = opts.protocol === 'https:' ? this.sessions.get(origin) : undefined;
      // A connector per connection: undici's takes a fixed session, and no cache of its own.
      const connect = buildConnector({ ...tls, maxCachedSessions: 0, ...(session ? { session } : {}) });
      // undici's connector returns the socket (its types say void): 'session' may come
      // before the handshake completes (TLS 1.2), so it is watched from the start.
      const socket = (connect as unknown as (...a: Parameters<buildConnector.connector>) => NodeJS.EventEmitter | undefined)(opts, callback);
      socket?.on('session', (s: Buffer) => this.sessions.set(origin, s));
    };
  }

  /** Whether a session is kept for `origin` (tests). */
  has(origin: string): boolean {
    return this.sessions.has(origin);
  }
}
