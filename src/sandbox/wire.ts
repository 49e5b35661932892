/**
 * What the sandbox does about bytes on the wire: bodies sent with Content-Encoding gzip
 * (accepted, or refused with 415 to rehearse a service that does not take them), and TLS
 * handshakes counted full or resumed, so the bench and tests can see what a push costs.
 */
import type { Server as TlsServer, TLSSocket } from 'node:tls';
import { gunzipSync } from 'node:zlib';

export interface WireStats {
  /** Request body bytes as they came (compressed or not). */
  bodyBytes: number;
  /** The same bodies' JSON bytes, decoded. */
  jsonBytes: number;
  /** TLS handshakes that sent the certificate chain, and those that resumed a session. */
  handshakes: { full: number; resumed: number };
}

export const emptyWireStats = (): WireStats => ({ bodyBytes: 0, jsonBytes: 0, handshakes: { full: 0, resumed: 0 } });

/** A body decoded to its JSON text, or the answer that refuses its encoding. */
export function decodeBody(raw: Buffer, encoding: string | undefined, acceptGzip: boolean, limit: number): { text: string } | { status: number; error: string } {
  const coding = (encoding ?? 'identity').trim().toLowerCase();
  if (coding === 'identity' || coding === '') return { text: raw.toString('utf8') };
  if (coding !== 'gzip' || !acceptGzip) return { status: 415, error: `Content-Encoding ${coding} is not accepted; send the body uncompressed` };
  try {
    // Bounded: a small gzip body must not unpack into gigabytes here.
    return { text: gunzipSync(raw, { maxOutputLength: limit }).toString('utf8') };
  } catch (err) {
    return { status: 400, error: `body is not valid gzip (Content-Encoding gzip): ${(err as Error).message}` };
  }
}

/** Count every TLS handshake of `server` in `stats`, full or resumed. */
export function countHandshakes(server: TlsServer, stats: () => WireStats): void {
  server.on('secureConnection', (socket: TLSSocket) => {
    const h = stats().handshakes;
    if (socket.isSessionReused()) h.resumed += 1;
    else h.full += 1;
  });
}
