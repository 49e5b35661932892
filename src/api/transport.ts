/**
 * The one undici dispatcher the client sends through: keep-alive connections to the service,
 * the config's timeouts, the proxy (api.proxy, else HTTPS_PROXY / HTTP_PROXY / NO_PROXY from
 * the environment, as undici's EnvHttpProxyAgent reads them) and a private CA (api.ca_file)
 * added to the public ones, for the service and for an HTTPS proxy alike.
 */
import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { rootCertificates } from 'node:tls';
import { Agent, type Dispatcher, EnvHttpProxyAgent } from 'undici';
import { addSecret } from '../log.js';
import { TLS_HELLO } from './tls-hello.js';
import type { TlsSessions } from './tls-sessions.js';

export interface TransportOptions {
  /** Giving up on a connection (name lookup, TCP and TLS handshakes) after this long, ms. */
  connectTimeoutMs: number;
  /** Giving up on the answer's headers, and on a silence while its body comes, after this long, ms. */
  timeoutMs: number;
  /** `undefined`: the environment's proxy variables; `direct`: none, whatever they say; else the proxy's URL. */
  proxy?: string;
  /** PEM certificates trusted besides the public CAs (the contents of api.ca_file). */
  ca?: string;
  /** TLS sessions to resume, kept across dispatchers (direct connections only). */
  sessions?: TlsSessions;
  /** What the ClientHello offers: the lean set (the default), or Node's own (api.tls_hello). */
  tlsHello?: 'lean' | 'node';
}

/** A proxy URL with its password replaced, fit for a log line or an error. */
export function redactProxy(url: string): string {
  if (url === 'direct') return url;
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.href;
  } catch {
    return '(not a URL)';
  }
}

/** Passwords in the service's and the proxies' URLs (api.base_url, api.proxy, the environment's) are scrubbed from every log line. */
export function addUrlSecrets(api: { base_url: string; proxy?: string }, env: NodeJS.ProcessEnv = process.env): void {
  for (const url of [api.base_url, api.proxy, env.https_proxy, env.HTTPS_PROXY, env.http_proxy, env.HTTP_PROXY]) {
    try {
      if (url) addSecret(decodeURIComponent(new URL(url).password));
    } catch {
      // Not a URL: undici refuses it at the first request, and says so.
    }
  }
}

/** The proxy requests to `target` go through, for the start-up log: where it comes from, without a password. */
export function proxyInUse(target: URL, proxy: string | undefined, env: NodeJS.ProcessEnv = process.env): string {
  if (proxy === 'direct') return 'none (api.proxy = "direct")';
  if (proxy) return `${redactProxy(proxy)} (api.proxy)`;
  const names = target.protocol === 'https:' ? ['https_proxy', 'HTTPS_PROXY', 'http_proxy', 'HTTP_PROXY'] : ['http_proxy', 'HTTP_PROXY'];
  const name = names.find((n) => env[n]);
  if (!name) return 'none';
  const noProxy = env.no_proxy ?? env.NO_PROXY;
  return `${redactProxy(env[name]!)} ($${name}${noProxy ? `, except $${env.no_proxy ? 'no_proxy' : 'NO_PROXY'}` : ''})`;
}

/**
 * The PEM certificates of api.ca_file, checked: a file that cannot be read or holds no
 * certificate is refused with a message naming it (the daemon would otherwise fail every
 * request with a TLS error an hour later).
 */
export function readCaFile(path: string): string {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    throw new Error(`cannot read ${path} (${e.code ?? e.message})`);
  }
  const pems = text.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
  if (pems.length === 0) throw new Error(`${path} holds no PEM certificate (-----BEGIN CERTIFICATE-----)`);
  for (const [i, pem] of pems.entries()) {
    try {
      new X509Certificate(pem);
    } catch (err) {
      throw new Error(`${path}: certificate ${i + 1} cannot be read (${(err as Error).message})`);
    }
  }
  return pems.join('\n');
}

export function createDispatcher(o: TransportOptions): Dispatcher {
  // Node's `ca` replaces the public CAs: a private CA is added to them, so a proxy doing TLS
  // inspection and the public service both verify.
  const tls = { timeout: o.connectTimeoutMs, ...(o.tlsHello === 'node' ? {} : TLS_HELLO), ...(o.ca ? { ca: [...rootCertificates, o.ca] } : {}) };
  const options = {
    // Direct connections resume the TLS session of the last one (./tls-sessions.ts); through
    // a proxy the tunnel's TLS is undici's own, with its weakly held cache.
    connect: o.sessions ? o.sessions.connector(tls) : tls,
    headersTimeout: o.timeoutMs,
    bodyTimeout: o.timeoutMs,
    // An idle connection is kept for as long as the server's Keep-Alive header says (less a
    // second, up to 10 min), 4 s when it says nothing: shorter than the usual idle timeouts
    // of servers and proxies, so a request rarely goes out on a connection being closed.
    keepAliveTimeout: 4_000,
    keepAliveMaxTimeout: 600_000,
    // The sender posts one request at a time: one connection, kept. (With more allowed,
    // undici opened a new one whenever the next request came before the last answer's
    // connection was marked free, which costs a TLS handshake on a cellular link.)
    connections: 1,
  };
  if (o.proxy === 'direct') return new Agent(options);
  // Through a proxy, the request to the service goes in a CONNECT tunnel (requestTls) and the
  // proxy itself may speak TLS (proxyTls): the same CA and timeout for both.
  const proxied = { ...options, requestTls: tls, proxyTls: tls };
  if (o.proxy) return new EnvHttpProxyAgent({ ...proxied, httpProxy: o.proxy, httpsProxy: o.proxy, noProxy: '' });
  return new EnvHttpProxyAgent(proxied);
}
