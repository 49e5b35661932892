/**
 * How the daemon tunes V8 for a small device, beyond the heap limits the unit gives it in
 * NODE_OPTIONS: `run` applies both below, and so does the bench's drain worker, which runs the
 * same Agent (docs/performance.md, rows 3a to 3f).
 *
 * --liftoff-only. undici parses HTTP answers with llhttp compiled to WebAssembly. On the first
 * request V8 compiles it with its baseline compiler (Liftoff), then recompiles the parser with
 * TurboFan in the background: some 35 MB of anonymous memory for a second or two (the peak of
 * `run` at 1 Hz 109 MB instead of 76 MB; of a drain 111 MB instead of 95 MB), to parse answers
 * of a few hundred bytes faster, which a request of 60 KB over loopback does not show. Node
 * refuses the flag in NODE_OPTIONS and the unit starts the bin (`#!/usr/bin/env node`), so it
 * is set here, before the first request compiles anything. Only WebAssembly is affected.
 *
 * One full collection after start-up. Loading and starting grows V8's young generation to its
 * limit (4 MB semi-spaces, the unit's --max-semi-space-size), some 8 MB more than an idle
 * agent needs. V8's memory reducer gives it back 8 s after start-up only if the old generation
 * had reached 10 MB by then, which a heap this small does by chance; otherwise it stays until
 * the next scavenge, a minute or more later (RssAnon about 29 MB instead of 20 MB until then).
 * One collection ends that, and arms the memory reducer. It costs some 25 ms, once.
 */
import { runInNewContext } from 'node:vm';
import { setFlagsFromString } from 'node:v8';

export const DAEMON_V8_FLAGS: readonly string[] = ['--liftoff-only'];

/** Set DAEMON_V8_FLAGS; they apply to WebAssembly compiled afterwards (undici's parser, on the first request). */
export function applyDaemonV8Flags(): void {
  for (const flag of DAEMON_V8_FLAGS) setFlagsFromString(flag);
}

/** When the collection after start-up runs: after the start-up's own work (the first commits, a waiting milestone). */
export const COLLECT_AFTER_START_MS = 10_000;

/**
 * One full garbage collection `delayMs` from now (the timer does not keep the process alive).
 * V8 gives a context the `gc` function only while --expose-gc is set: a throwaway context gets
 * it, and the flag is cleared again at once, so no other code ever sees a `gc`.
 */
export function collectAfterStart(delayMs = COLLECT_AFTER_START_MS): NodeJS.Timeout {
  return setTimeout(() => {
    try {
      setFlagsFromString('--expose-gc');
      const gc = runInNewContext('gc') as () => void;
      setFlagsFromString('--no-expose-gc');
      gc();
    } catch {
      // A Node that refuses flags after start-up: V8's own heuristics give the memory back later.
    }
  }, delayMs).unref();
}
