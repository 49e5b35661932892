/**
 * Opening the buffer for the daemon, and what to do with one that cannot be used: after an
 * unclean stop every page is read once (a power cut is when a file gets damaged), after a
 * clean one what delivery reads next (check.ts); a corrupt
 * buffer stops the agent (`buffer.on_corrupt = "stop"`, exit 65) or is moved aside for
 * `buffer salvage` and replaced by an empty one (`"move-aside"`).
 */
import { existsSync, renameSync } from 'node:fs';
import type { Logger } from 'pino';
import type { Config } from '../config/schema.js';
import { DAEMON_STATE_KEY, type DaemonState } from '../daemon-state.js';
import { BufferError } from '../errors.js';
import { checkAhead } from './check.js';
import { Store } from './store.js';

type BufferConfig = Config['buffer'];

/**
 * Move a corrupt buffer (and its -wal and -shm) aside, keeping SQLite's naming so it can be
 * salvaged. A WAL of another database (`foreignWal`) is not given the -wal name: beside the
 * moved file SQLite would apply it again, and `buffer salvage` would copy the other
 * database's loads and readings as this buffer's. It becomes `<moved>.foreign-wal`.
 */
export function moveAside(path: string, nowMs = Date.now(), foreignWal = false): string {
  const stamp = new Date(nowMs)
    .toISOString()
    .replace(/[-:]/g, '')
    .replace(/\.\d+Z$/, 'Z');
  const target = `${path}.corrupt-${stamp}`;
  for (const suffix of ['', '-wal', '-shm']) {
    const to = foreignWal && suffix ? `${target}.foreign${suffix}` : target + suffix;
    if (existsSync(path + suffix)) renameSync(path + suffix, to);
  }
  return target;
}

/** Open the daemon's buffer (see the top of this file). */
export function openBuffer(b: BufferConfig, log: Logger): Store {
  // daemon: the agent took the buffer's lock before this, so it is the one that migrates it.
  const opts = { synchronous: b.synchronous, cacheKb: b.cache_kb, reserveKb: b.reserve_kb, daemon: true };
  const last = b.path !== ':memory:' && existsSync(b.path) ? lastStop(b.path) : 'clean';
  const verify = last === 'clean' ? false : last === 'corrupt' ? 'full' : true;
  try {
    const store = Store.open(b.path, { ...opts, verify });
    if (verify === false) {
      try {
        checkAhead(store);
      } catch (err) {
        store.close();
        throw err;
      }
    }
    return store;
  } catch (err) {
    if (!(err instanceof BufferError) || (err.problem !== 'corrupt' && err.problem !== 'foreign-wal') || b.on_corrupt !== 'move-aside') throw err;
    const foreign = err.problem === 'foreign-wal';
    const moved = moveAside(b.path, Date.now(), foreign);
    log.error(
      { buffer: b.path, movedTo: moved, ...(foreign ? { foreignWal: `${moved}.foreign-wal` } : {}), problem: err.message },
      `buffer unusable (${err.problem}); moved aside to ${moved}${foreign ? ` (the WAL of the other database to ${moved}.foreign-wal)` : ''} and started with an empty buffer (buffer.on_corrupt = "move-aside"). Copy what is readable back with: telematics-agent buffer salvage ${moved}`,
    );
    return Store.open(b.path, opts);
  }
}

/**
 * How the daemon that last ran on this buffer stopped (read-only look): cleanly, not
 * (killed, power cut), or because it found the buffer corrupt. The last is not a clean
 * stop although it went through stop(): without this, a buffer found corrupt while
 * running opened as clean, failed again in the first delivery cycle, and the unit
 * restarted it every RestartSec forever instead of moving it aside.
 */
function lastStop(path: string): 'clean' | 'unclean' | 'corrupt' {
  let store: Store | undefined;
  try {
    store = Store.open(path, { readonly: true });
    const state = store.getState<DaemonState>(DAEMON_STATE_KEY)?.value;
    if (state?.corrupt) return 'corrupt';
    return state?.running === false ? 'clean' : 'unclean';
  } catch {
    return 'unclean';
  } finally {
    store?.close();
  }
}

/**
 * The buffer turned out corrupt while the daemon ran: the error to log, and the one the
 * daemon exits with. With `on_corrupt = "move-aside"` that is a plain failure (exit 1,
 * Restart=on-failure), and the restart does the moving at open; otherwise the BufferError
 * (exit 65, which the unit does not restart on).
 */
export function corruptWhileRunning(b: BufferConfig, message: string): { error: BufferError; fatal: Error } {
  const error = new BufferError(
    'corrupt',
    b.path,
    `${b.path}: the buffer turned out corrupt while running (${message}). ${
      b.on_corrupt === 'move-aside'
        ? 'Restarting moves it aside (buffer.on_corrupt = "move-aside").'
        : 'Set buffer.on_corrupt = "move-aside" or move it aside, then start again; copy what is readable back with telematics-agent buffer salvage.'
    }`,
  );
  const fatal = b.on_corrupt === 'move-aside' ? Object.assign(new Error(error.message), { code: error.code }) : error;
  return { error, fatal };
}
