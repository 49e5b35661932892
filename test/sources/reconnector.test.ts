/**
 * The Reconnector on a link the test drives, with fake timers: the waits are the backoff's
 * to the millisecond, whatever the load on the machine. The sources' own tests run it
 * against real peers (gpsd, a pty, a FIFO, child processes).
 */
import { EventEmitter } from 'node:events';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Reconnector, type Link, type Opened, type ReconnectorOptions } from '../../src/sources/reconnector.js';
import { recorder } from './support.js';

class FakeLink extends EventEmitter implements Link {
  destroyed = false;

  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    this.emit('close');
  }

  send(text: string): void {
    this.emit('data', Buffer.from(text));
  }

  /** The peer closes it (a device unplugged, a command that exits). */
  drop(err?: string): void {
    if (err) this.emit('error', Object.assign(new Error(err), { code: err }));
    this.destroy();
  }
}

type FakeOpened = Opened<FakeLink>;

beforeEach(() => vi.useFakeTimers());
afterEach(() => vi.useRealTimers());

/** A Reconnector whose opens are answered by `answer` (a link, or an error code to fail with). */
function setup(extra: Partial<ReconnectorOptions<FakeOpened>> = {}, answer: () => FakeOpened | string = () => ({ link: new FakeLink() })) {
  const rec = recorder();
  const links: FakeLink[] = [];
  const lines: string[] = [];
  const waits: number[] = [];
  const r = new Reconnector<FakeOpened>({
    ctx: rec.ctx,
    open: async () => {
      const a = answer();
      if (typeof a === 'string') throw Object.assign(new Error(a), { code: a });
      links.push(a.link);
      return a;
    },
    initialMs: 50,
    maxMs: 400,
    noDataTimeoutS: 0,
    maxLineBytes: 16,
    data: 'alive',
    lastLine: 'decode',
    line: (text) => lines.push(text),
    retrying: (wait) => waits.push(wait),
    ...extra,
  });
  return { r, rec, links, lines, waits, last: () => links[links.length - 1] };
}

describe('reconnector', () => {
  it('opens a closed link again after the backoff, doubling to the cap; data starts it over', async () => {
    const { r, links, waits, last } = setup();
    await r.start();
    expect(links).toHaveLength(1);
    for (const wait of [50, 100, 200, 400, 400]) {
      const n = links.length;
      last().drop();
      expect(waits.at(-1)).toBe(wait);
      await vi.advanceTimersByTimeAsync(wait - 1);
      expect(links).toHaveLength(n); // not a millisecond early
      await vi.advanceTimersByTimeAsync(1);
      expect(links).toHaveLength(n + 1);
    }
    expect(r.counters.opens).toBe(6);
    // An open alone proves nothing (a device that opens and fails at once); data does.
    last().send('$GPRMC\n');
    last().drop();
    expect(waits.at(-1)).toBe(50);
    await r.stop();
  });

  it('reports failed opens with AttemptLog: info first, one warning once at the cap, info when the device speaks again', async () => {
    let fail = 5;
    const { r, rec, links, last } = setup({ peer: 'gpsd at 127.0.0.1:2947' }, () => (fail-- > 0 ? 'ECONNREFUSED' : { link: new FakeLink() }));
    await r.start();
    expect(r.lastError).toBe('ECONNREFUSED');
    expect(r.counters.failedOpens).toBe(1);
    await vi.advanceTimersByTimeAsync(50 + 100 + 200 + 400 + 399);
    expect(links).toHaveLength(0);
    await vi.advanceTimersByTimeAsync(1);
    expect(links).toHaveLength(1);
    expect(r.lastError).toBeUndefined();
    last().send('x\n');
    const attempts = rec.logs.filter((l) => l.msg.includes('gpsd at 127.0.0.1:2947'));
    expect(attempts.map((l) => [l.level, l.msg])).toEqual([
      [30, 'gpsd at 127.0.0.1:2947 not available yet; retrying'],
      [20, 'gpsd at 127.0.0.1:2947 not available; retrying'],
      [40, 'gpsd at 127.0.0.1:2947 still not available after 3 attempts; retrying every 0 s'],
      [20, 'gpsd at 127.0.0.1:2947 not available; retrying'],
      [20, 'gpsd at 127.0.0.1:2947 not available; retrying'],
      [30, 'gpsd at 127.0.0.1:2947 available again'],
    ]);
    expect(r.failures).toBe(0);
    await r.stop();
  });

  it('calls a quiet link silent; one that may hide a gone peer is opened again and stays silent until it speaks', async () => {
    const silent: number[] = [];
    let resumed = 0;
    const tty = setup({ noDataTimeoutS: 1, silent: () => silent.push(Date.now()), resumed: () => (resumed += 1) }, () => ({ link: new FakeLink(), reopenWhenSilent: true }));
    await tty.r.start();
    await vi.advanceTimersByTimeAsync(999);
    expect(tty.r.silent).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect([tty.r.silent, tty.r.lastError, tty.r.counters.timeouts]).toEqual([true, 'no data for 1 s', 1]);
    expect(tty.links[0].destroyed).toBe(true);
    await vi.advanceTimersByTimeAsync(50);
    expect(tty.links).toHaveLength(2);
    expect(tty.r.silent).toBe(true); // reopened, still silent
    await vi.advanceTimersByTimeAsync(1000 + 100); // silent again: closed, and reopened after the next wait
    expect([tty.links.length, silent.length]).toEqual([3, 1]); // said once per silence
    tty.last().send('$GPGGA\n');
    expect([tty.r.silent, resumed]).toEqual([false, 1]);
    await tty.r.stop();

    // A FIFO or a command: left open, marked silent; a new link starts afresh.
    const fifo = setup({ noDataTimeoutS: 1 });
    await fifo.r.start();
    await vi.advanceTimersByTimeAsync(1000);
    expect([fifo.r.silent, fifo.links[0].destroyed]).toEqual([true, false]);
    fifo.last().drop();
    await vi.advanceTimersByTimeAsync(50);
    expect([fifo.links.length, fifo.r.silent]).toEqual([2, false]);
    await fifo.r.stop();
  });

  it('gives up an open that hangs after the no-data timeout, and tries again', async () => {
    const aborted: number[] = [];
    const { r, rec } = setup({
      noDataTimeoutS: 2,
      openTimeout: true,
      peer: 'gpsd at 10.0.0.1:2947',
      open: (signal) => new Promise((_resolve, reject) => signal.addEventListener('abort', () => (aborted.push(Date.now()), reject(new Error('aborted'))))),
    });
    const t0 = Date.now();
    void r.start();
    await vi.advanceTimersByTimeAsync(2000);
    expect(aborted.map((t) => t - t0)).toEqual([2000]);
    expect([r.lastError, r.counters.timeouts, r.counters.failedOpens]).toEqual(['no data for 2 s', 1, 1]);
    expect(rec.logs.find((l) => l.msg.includes('not available yet'))).toMatchObject({ err: 'no data for 2 s' });
    await vi.advanceTimersByTimeAsync(50 + 2000);
    expect(aborted.map((t) => t - t0)).toEqual([2000, 4050]);
    await r.stop();
  });

  it('splits lines, rejects overlong ones without holding them, and decodes or drops a half last line', async () => {
    const file = setup({}, () => ({ link: new FakeLink(), finite: true }));
    await file.r.start();
    file.last().send('$GPGGA,1\r\n$GPRMC,2');
    file.last().send(`${'$'.repeat(40)}\n$GPGSA`);
    file.last().emit('end');
    file.last().destroy();
    expect(file.lines).toEqual(['$GPGGA,1', '$GPGSA']);
    expect(file.rec.rejects).toEqual(['line 2: 48 bytes, longer than max_line_bytes (16); skipped']);
    expect([file.r.counters.overlongLines, file.r.lines, file.r.finished, file.links.length]).toEqual([1, 3, false, 1]);

    const socket = setup({ lastLine: 'drop' });
    await socket.r.start();
    socket.last().send('{"class":"TPV"}\n{"class":"TP');
    socket.last().drop('ECONNRESET');
    expect(socket.lines).toEqual(['{"class":"TPV"}']);
    expect(socket.r.lastError).toBe('ECONNRESET');
    await file.r.stop();
    await socket.r.stop();
  });

  it('stops for good: the link closed, an open under way given up, no timer left', async () => {
    const { r, links } = setup({ noDataTimeoutS: 5 });
    await r.start();
    links[0].drop(); // a reopen is now pending
    await r.stop();
    expect(vi.getTimerCount()).toBe(0);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(links).toHaveLength(1);
    expect(r.active).toBe(false);

    const hanging = setup({ open: (signal) => new Promise((_resolve, reject) => signal.addEventListener('abort', () => reject(new Error('aborted')))) });
    void hanging.r.start();
    await hanging.r.stop(); // returns: the open is aborted, not waited out
    expect(vi.getTimerCount()).toBe(0);
    expect(hanging.r.counters.failedOpens).toBe(0); // stopping is not a failure
  });
});
