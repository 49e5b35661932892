/**
 * `ui.listen` as host and port, and whether it is reachable only from the device itself
 * (loopback): there the PIN and TLS may be left out, since whoever can reach the page can
 * already run the CLI.
 */

/** `127.0.0.1:8090`, `[::1]:8090`, `0.0.0.0:8090`, `cab.local:8090`. */
export const LISTEN_PATTERN = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})$/;

export function parseListen(listen: string): { host: string; port: number } {
  const m = LISTEN_PATTERN.exec(listen);
  if (!m) throw new RangeError(`ui.listen: expected host:port, got ${JSON.stringify(listen)}`);
  return { host: m[1].replace(/^\[|\]$/g, ''), port: Number(m[2]) };
}

export function isLoopback(listen: string): boolean {
  const m = LISTEN_PATTERN.exec(listen);
  if (!m) return false;
  const host = m[1].replace(/^\[|\]$/g, '').toLowerCase();
  return host === 'localhost' || host === '::1' || /^127\.\d+\.\d+\.\d+$/.test(host);
}
