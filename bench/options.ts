/**
 * The bench's command line and the sizes it runs with, shared by every row group.
 */
import { configSchema } from '../src/config/schema.js';
import { DAEMON_V8_FLAGS } from '../src/v8-tuning.js';
import { unitNodeOptions } from './common.js';

export const MB = 1024 * 1024;

const argv = process.argv.slice(2);
export const flag = (name: string) => argv.includes(name);
export const option = (name: string) => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
};
export const HELP = `usage: node dist-bench/bench/bench.js [--quick] [--json] [--dir DIR] [--cpu-prof DIR]
  --quick          small sizes (CI): 20k readings, 5 s idle, outages of seconds
                   (a full run takes at least 30 min: its longest outage)
  --json           print the results as one JSON object instead of the table
  --dir DIR        work directory (must be on a real disk for the flash figure; default: the OS temp dir)
  --cpu-prof DIR   run the drain workers with --cpu-prof, profiles written to DIR
`;

export const QUICK = flag('--quick');
export const JSON_OUT = flag('--json');
export const PROF_DIR = option('--cpu-prof');

export const SIZES = QUICK
  ? {
      ingest: 20_000,
      rounds: 3,
      large: { loads: 200, perLoad: 100 },
      small: { loads: 20, perLoad: 100 },
      shared: { loads: 50, perLoad: 200, loadsPerTruck: 3 },
      week: 20_000,
      cellular: 10_000,
      peerRequests: 10,
      idleS: 5,
      settleMs: 500,
      idleSettleMs: 3000,
    }
  : {
      ingest: 200_000,
      rounds: 3,
      large: { loads: 200, perLoad: 5000 },
      small: { loads: 200, perLoad: 500 },
      // Row 2e/2f: 3 loads on each of 50 trucks over a 1M-reading backlog, vs one load per truck.
      shared: { loads: 50, perLoad: 20_000, loadsPerTruck: 3 },
      week: 604_800,
      cellular: 604_800,
      peerRequests: 40,
      idleS: 60,
      settleMs: 2000,
      idleSettleMs: 15_000,
    };
export const LATENCY_MS = 150;
/** Drains of the large backlog, each in turns with the ceiling (bench/drain.ts): 2a is their median (one in a quick run). */
export const DRAIN_RUNS = QUICK ? 1 : 5;
export const BUFFER_DEFAULTS = configSchema.shape.buffer.parse({});
export const LOADS_DEFAULTS = configSchema.shape.loads.parse({});
/** The agent's processes (drain worker, daemon) run with the unit's heap flags; reference clients with Node's defaults. */
export const AGENT_NODE_OPTIONS = unitNodeOptions();
/** And with the V8 flags `run` sets on itself (src/v8-tuning.ts; the drain worker sets them the same way). */
export const AGENT_V8_FLAGS = DAEMON_V8_FLAGS.join(' ');
export const PEER_RETRY_S = 30;
