/**
 * Child process of the bench, so that what is measured (RSS, CPU) is this process alone while
 * the sandbox runs in the parent. Driven over the IPC channel (see WorkerCommand):
 *
 * - `drain`: the real Agent (no sources, the V8 flags `run` sets) on a buffer file holding a
 *   backlog and a milestone, which it sends at once; on `go` it pushes traces until the
 *   buffer is empty, then waits for `stop`.
 * - `ceiling`: a plain undici client posting, in turns with a drain, pre-built trace bodies (the ones the agent
 *   builds from the same buffer, each once) one after another: what the sandbox can take.
 * - `peer`: one reading per request, posted one after another: the per-request time of a
 *   tracker that sends every reading on its own.
 */
import { Agent } from '../src/agent.js';
import { Store } from '../src/buffer/store.js';
import { configSchema, type Config } from '../src/config/schema.js';
import { buildTraceChunk, nextStopResolver, type TraceBuildOptions } from '../src/delivery/traces.js';
import { createLogger } from '../src/log.js';
import { applyDaemonV8Flags, collectAfterStart } from '../src/v8-tuning.js';
import { BENCH_CLIENT_DEVICE, BENCH_CLIENT_HEADER, BENCH_DEVICE, BENCH_KEY, BENCH_SCAC, CHUNK, drainConfigInput, type WorkerCommand, type WorkerEvent } from './common.js';

const send = (e: WorkerEvent) => process.send?.(e);

let onCommand: (c: WorkerCommand) => void = () => undefined;
process.on('message', (c: WorkerCommand) => onCommand(c));
const next = (...cmds: Array<WorkerCommand['cmd']>) =>
  new Promise<WorkerCommand>((resolve) => {
    onCommand = (c) => {
      if (cmds.includes(c.cmd)) resolve(c);
    };
  });

async function drain(c: Extract<WorkerCommand, { cmd: 'drain' }>): Promise<void> {
  // As `run` does: the Agent here is the daemon's, V8 tuning included (collectAfterStart below).
  applyDaemonV8Flags();
  const config = configSchema.parse(drainConfigInput(c.url, c.dbPath));
  const log = createLogger({ level: 'warn' });
  const agent = new Agent({ file: '(bench)', config, deviceId: BENCH_DEVICE, warnings: [] }, { key: BENCH_KEY, origin: 'bench' }, log, {
    sources: () => [],
  });
  const go = next('go');
  await agent.start();
  collectAfterStart();
  send({ ev: 'started' });
  await go;
  const stop = next('stop');
  const t0 = performance.now();
  // One push drains everything (chunk after chunk, drain_interval_ms apart); a failed request
  // would leave a rest behind after its backoff, so push again until nothing is left.
  let left = 1;
  for (let round = 0; round < 20 && left > 0; round++) {
    await agent.pushTracesNow();
    left = agent.store.loadsWithReadings().length;
  }
  const ms = performance.now() - t0;
  // Delivered rows are deleted after the push, in slices, off the delivery path: timed apart.
  await agent.sender.idle();
  const purgeMs = performance.now() - t0 - ms;
  const { traceRequests, tracePoints } = agent.sender.status.sent;
  send({ ev: 'drained', ms, purgeMs, left: left > 0 ? agent.store.counts().readings : 0, requests: traceRequests, points: tracePoints });
  await stop;
  await agent.stop();
  send({ ev: 'stopped' });
}

function traceOptions(config: Config, maxPoints: number, deviceId = BENCH_DEVICE): TraceBuildOptions {
  return {
    samplingMs: config.sampling.interval_s * 1000,
    maxPoints,
    dateForm: config.api.date_time_format,
    deviceId,
    temperatureMaxAgeMs: config.sampling.temperature_max_age_s * 1000,
    temperatureUnit: config.api.temperature_unit,
    extraFields: config.api.extra_fields,
    temperatureWithoutFix: config.traces.temperature_without_fix,
    maxFixAgeMs: config.milestones.max_fix_age_s * 1000,
  };
}

/** The first `count` request bodies the agent would send for this buffer, serialised and encoded (as the drain sends them). */
function buildBodies(dbPath: string, config: Config, count: number, maxPoints: number, deviceId: string): Array<{ body: Buffer; key: string; points: number }> {
  const store = Store.open(dbPath);
  const out: Array<{ body: Buffer; key: string; points: number }> = [];
  try {
    for (const load of store.listLoads()) {
      const stopAt = nextStopResolver(load, [], config.codes.departure);
      let afterId = 0;
      while (out.length < count) {
        const chunk = buildTraceChunk(load, store.iterateReadings(load.loadNumber, afterId), stopAt, traceOptions(config, maxPoints, deviceId));
        if (!chunk?.body) break;
        out.push({ body: Buffer.from(JSON.stringify(chunk.body)), key: chunk.idempotencyKey, points: chunk.points });
        afterId = chunk.lastId;
      }
      if (out.length >= count) break;
    }
  } finally {
    store.close();
  }
  return out;
}

/**
 * Post `requests` bodies one after another: each once when the buffer holds that many (else
 * cycled, each time with a key of its own). Each once because the sandbox remembers every
 * traceId it has seen, as a service that drops repeated points must: a body it has seen
 * before is not the work the drain's million new points are.
 *
 * The ceiling posts in turns with a drain (bench/drain.ts): the bodies are built, `ready`
 * said, and each `slice` command posts for its milliseconds (one request at least, each body
 * once), until `end`; the totals are those of the slices. The peer posts `requests` at once.
 */
async function post(c: Extract<WorkerCommand, { cmd: 'ceiling' | 'peer' }>, maxPoints: number): Promise<void> {
  const config = configSchema.parse(drainConfigInput(c.url, c.dbPath));
  const sliced = c.cmd === 'ceiling';
  const bodies = buildBodies(c.dbPath, config, c.requests, maxPoints, sliced ? BENCH_CLIENT_DEVICE : BENCH_DEVICE);
  if (bodies.length === 0) throw new Error(`no readings in ${c.dbPath}`);
  // Imported here, not at the top: a drain worker must hold the agent's modules only, or its
  // RSS would count the reference client's too.
  const { Agent: HttpAgent, request } = await import('undici');
  const dispatcher = new HttpAgent({ keepAliveTimeout: 30_000 });
  const url = new URL(config.api.trace_path, c.url);
  const headers = {
    'Ocp-Apim-Subscription-Key': BENCH_KEY,
    carrierSCAC: BENCH_SCAC,
    Accept: 'application/json',
    'Content-Type': 'application/json',
    [BENCH_CLIENT_HEADER]: c.cmd,
  };
  let points = 0;
  let bytes = 0;
  let failed = 0;
  let i = 0;
  const postOne = async () => {
    const b = bodies[i % bodies.length];
    const res = await request(url, {
      method: 'POST',
      headers: { ...headers, 'Idempotency-Key': `${b.key}-${Math.floor(i / bodies.length)}` },
      body: b.body,
      dispatcher,
    });
    await res.body.text();
    if (res.statusCode !== 200) failed += 1;
    points += b.points;
    bytes += b.body.length;
    i += 1;
  };
  let ms = 0;
  if (sliced) {
    send({ ev: 'ready' });
    for (;;) {
      const s = await next('slice', 'end');
      if (s.cmd !== 'slice') break;
      const t0 = performance.now();
      const [requests0, points0] = [i, points];
      // Each body once: a body the sandbox has seen is less work (see above).
      while (i < bodies.length) {
        await postOne();
        if (performance.now() - t0 >= s.ms) break;
      }
      const took = performance.now() - t0;
      ms += took;
      send({ ev: 'sliced', ms: took, requests: i - requests0, points: points - points0 });
    }
  } else {
    const t0 = performance.now();
    while (i < c.requests) await postOne();
    ms = performance.now() - t0;
  }
  await dispatcher.close();
  send({ ev: 'posted', ms, requests: i, points, bytes, failed });
}

onCommand = (c) => {
  const run = c.cmd === 'drain' ? drain(c) : c.cmd === 'ceiling' ? post(c, CHUNK) : c.cmd === 'peer' ? post(c, 1) : Promise.reject(new Error(`unexpected command ${c.cmd}`));
  run.catch((err) => send({ ev: 'error', message: (err as Error).stack ?? String(err) })).finally(() => process.disconnect?.());
};
