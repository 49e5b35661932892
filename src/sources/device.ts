/**
 * Opening a device path for reading, whatever is behind it: a serial tty (a GPS receiver on
 * USB or a UART), a FIFO (another program writes to it), or a regular file (a recording,
 * replayed once). Only the bytes: what they mean is the source's business.
 */
import { execFile } from 'node:child_process';
import { close as closeFdCb, constants as fsConstants, createReadStream, open as openFdCb } from 'node:fs';
import { stat } from 'node:fs/promises';
import { Socket } from 'node:net';
import type { Readable } from 'node:stream';
import { ReadStream as TtyReadStream } from 'node:tty';
import type { Opened } from './reconnector.js';

export type DeviceKind = 'tty' | 'fifo' | 'file';

export interface OpenedDevice extends Opened<Readable> {
  kind: DeviceKind;
}

/**
 * A tty is set to `baud` (`stty -F DEV BAUD raw -echo`) and opened again when it goes quiet
 * (a USB receiver that re-enumerates is a new device behind the same name); a FIFO is opened
 * read-write, so writers may come and go without an end of file; a regular file is read
 * once to its end.
 */
export async function openDevice(path: string, baud: number): Promise<OpenedDevice> {
  const st = await stat(path);
  if (st.isFile()) return { kind: 'file', link: createReadStream(path, { highWaterMark: 16 * 1024 }), finite: true };
  if (st.isFIFO()) {
    // Read-write: the FIFO then always has a writer (us), so a writer that closes and
    // another that opens later never look like an end of file.
    const fd = await openFd(path, fsConstants.O_RDWR | fsConstants.O_NONBLOCK);
    try {
      return { kind: 'fifo', link: new Socket({ fd, readable: true, writable: false }) };
    } catch (err) {
      await closeFd(fd);
      throw err;
    }
  }
  if (st.isCharacterDevice()) {
    await setLine(path, baud);
    const fd = await openFd(path, fsConstants.O_RDONLY | fsConstants.O_NOCTTY | fsConstants.O_NONBLOCK);
    let tty: TtyReadStream;
    try {
      tty = new TtyReadStream(fd);
    } catch (err) {
      await closeFd(fd);
      throw err;
    }
    // libuv reopens a tty by its name (so its non-blocking mode is private) and keeps
    // our descriptor as a duplicate it never closes: close it, or every reopen leaks one.
    const handleFd = (tty as unknown as { _handle?: { fd?: number } })._handle?.fd;
    if (typeof handleFd === 'number' && handleFd >= 0 && handleFd !== fd) await closeFd(fd);
    return { kind: 'tty', link: tty, reopenWhenSilent: true };
  }
  throw new Error('not a tty, FIFO or regular file');
}

// Plain descriptors (not FileHandles): the stream owns them, and a FileHandle would be
// closed under it when garbage-collected.
function openFd(path: string, flags: number): Promise<number> {
  return new Promise((resolve, reject) => openFdCb(path, flags, (err, fd) => (err ? reject(err) : resolve(fd))));
}

function closeFd(fd: number): Promise<void> {
  return new Promise((resolve) => closeFdCb(fd, () => resolve()));
}

/** `stty -F DEV BAUD raw -echo`: line speed, no line editing, no echo back to the receiver. */
function setLine(device: string, baud: number): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile('stty', ['-F', device, String(baud), 'raw', '-echo'], { timeout: 5000 }, (err, _stdout, stderr) => {
      if (err) reject(new Error(`stty -F ${device} ${baud} raw -echo failed: ${(stderr || err.message).trim()}`));
      else resolve();
    });
  });
}
