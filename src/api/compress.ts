/**
 * api.compress: request bodies gzip-encoded (Content-Encoding: gzip) from a size on. The
 * spec says nothing of it, so it is off by default; a service that refuses it says so with
 * 415 Unsupported Media Type (RFC 7694), or with a 400 that names the encoding, and the
 * client then sends uncompressed (./client.ts).
 */
import { promisify } from 'node:util';
import { gzip } from 'node:zlib';
import type { Payload } from './client.js';

export interface Compression {
  method: 'none' | 'gzip';
  /** Bodies smaller than this go uncompressed: below it gzip saves less than it costs the CPU. */
  minBytes: number;
}

const gzipAsync = promisify(gzip);

/** The body gzip-encoded, or undefined when it goes as it is. */
export async function compressedBody(payload: Payload, c: Compression | undefined): Promise<Buffer | undefined> {
  if (!c || c.method !== 'gzip') return undefined;
  const size = typeof payload === 'string' ? Buffer.byteLength(payload) : payload.length;
  if (size < c.minBytes) return undefined;
  // Level 6 (zlib's default): the JSON of a push shrinks some 5-8x; 9 buys a few bytes for twice the CPU.
  return gzipAsync(payload);
}

/** Whether an answer to a gzip-encoded request refuses the encoding itself (not the data). */
export function refusesEncoding(status: number, body: string): boolean {
  return status === 415 || (status === 400 && /gzip|content-encoding|encoding/i.test(body));
}
