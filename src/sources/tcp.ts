/**
 * A TCP client connection, for a source that reads a peer over the network (gpsd). Only the
 * bytes: what they mean is the source's business.
 */
import { connect, type Socket } from 'node:net';
import type { Opened } from './reconnector.js';

/**
 * Connect to `host:port`; resolves once connected, rejects with the error that stopped it
 * (ECONNREFUSED...) once the socket is closed. Aborting closes the socket. The socket is
 * reopened when it goes silent: a peer restarted under us can leave it looking alive.
 */
export function connectTcp(host: string, port: number, signal: AbortSignal): Promise<Opened<Socket>> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host, port });
    socket.setNoDelay(true);
    let error: Error | undefined;
    const onError = (err: Error) => (error ??= err);
    const onAbort = () => socket.destroy();
    const onClose = () => {
      signal.removeEventListener('abort', onAbort);
      reject(error ?? new Error(signal.aborted ? 'connect given up' : 'connection closed'));
    };
    socket.on('error', onError);
    socket.once('close', onClose);
    socket.once('connect', () => {
      signal.removeEventListener('abort', onAbort);
      // onError stays: an error before the caller adds its own listener must not be thrown.
      socket.off('close', onClose);
      resolve({ link: socket, reopenWhenSilent: true });
    });
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
  });
}
