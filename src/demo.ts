/**
 * `telematics-agent demo`: the sandbox and the agent in one process. A simulated reefer
 * truck loads in Chicago, drives to Indianapolis and unloads, at a few hundred times real
 * speed. It carries two loads: the first from Chicago, the second picked up on the way, in
 * Lafayette, while the first stays on; both are delivered at the same Indianapolis dock.
 * Milestones are recorded for each load as the truck reaches and leaves its stops, each
 * load's traces go out on a fast schedule with the points of its own window, and the sandbox
 * fails a few requests on purpose to show the retry. It ends with a summary that checks
 * nothing was lost.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent } from './agent.js';
import type { MilestoneBody, TraceBody } from './api/schemas.js';
import { configSchema, type SimulatorSourceConfig } from './config/schema.js';
import { createLogger } from './log.js';
import { recordMilestone } from './milestones/record.js';
import type { Stop } from './milestones/stops.js';
import { Sandbox } from './sandbox/server.js';
import { BUILTIN_ROUTES } from './sources/routes.js';
import { SimulatorModel, SimulatorSource } from './sources/simulator.js';

export interface DemoOptions {
  timeScale: number;
  keep: boolean;
  /** Where to write the feed (tests capture it). */
  write?: (line: string) => void;
  /** Give up after this many wall seconds. */
  timeoutS?: number;
}

const LOAD = 'DEMO-LOAD-1';
/** Picked up on the way, while LOAD stays on the truck; delivered at the same dock. */
const LOAD2 = 'DEMO-LOAD-2';
const RESOURCE = 'TRUCK-DEMO';
/** Where LOAD2 is picked up: Lafayette, IN, about halfway. */
const MIDWAY = 10;

export async function runDemo(opts: DemoOptions): Promise<boolean> {
  const write = opts.write ?? ((s: string) => process.stdout.write(`${s}\n`));
  const key = `demo-${randomBytes(12).toString('hex')}`;
  const scac = 'DEMO';
  const route = BUILTIN_ROUTES['chicago-indianapolis'];
  // The delivery stop; the route goes on a little so the truck can be seen leaving it.
  const last = route.length - 2;

  const simCfg: SimulatorSourceConfig = configSchema.shape.sources.parse([
    {
      type: 'simulator',
      resource_id: RESOURCE,
      resource_type: 'Truck',
      interval_s: 10,
      time_scale: opts.timeScale,
      stops: [
        { at_point: 0, dwell_s: 1800 },
        { at_point: MIDWAY, dwell_s: 900 },
        { at_point: last, dwell_s: 1800 },
      ],
      temperature: { set_point_c: 2, door_open_at_s: 0, door_open_duration_s: 0 },
    },
  ])[0] as SimulatorSourceConfig;
  // Made once the options passed the simulator's schema: a refused one left an empty directory.
  const dir = mkdtempSync(join(tmpdir(), 'telematics-demo-'));
  const durationS = SimulatorModel.durationS(simCfg, route);
  // Open the reefer door during unloading, so the temperature excursion shows in the traces.
  simCfg.temperature.door_open_at_s = durationS - 1500;
  simCfg.temperature.door_open_duration_s = 900;
  // The simulated day ends about now: every reading has a time in the past.
  const startMs = Date.now() - durationS * 1000;
  simCfg.start_time = new Date(startMs).toISOString();

  let received = 0;
  const sandbox = new Sandbox({
    key,
    scac,
    onRequest: (e) => {
      if (e.status !== 200) {
        write(`  ${e.kind.padEnd(9)} ${String(e.status || '---').padEnd(4)} ${e.problem ?? ''} -> the agent keeps the data and retries`);
        return;
      }
      received += 1;
      if (e.kind === 'milestone') {
        const b = e.body as MilestoneBody;
        write(
          `  milestone 200  ${b.loadNumber}  ${b.eventCode.padEnd(3)} stop ${b.stopsequenceNumber ?? '-'}  ${b.eventCity ?? '?'}, ${b.eventState ?? '?'}  ${b.time.dateTime} ${b.time.timeZoneCode} (${b.time.timeZoneOffset})`,
        );
      } else if (e.kind === 'trace') {
        const b = e.body as TraceBody;
        const first = b.traces[0];
        const lastT = b.traces[b.traces.length - 1];
        const temp = lastT.temperature ? `${lastT.temperature.value.toFixed(1)} ${lastT.temperature.unitOfMeasure}` : '-';
        write(
          `  trace     200  ${b.loadNumber}  ${String(b.traces.length).padStart(3)} points  ${first.time.dateTime.slice(11, 16)}-${lastT.time.dateTime.slice(11, 16)} ${lastT.time.timeZoneCode}  next stop ${lastT.stopsequenceNumber ?? '-'}  near ${b.eventCity ?? '?'}, ${b.eventState ?? '?'}  reefer ${temp}`,
        );
      }
      // A short outage a few requests in: the next two requests fail, nothing is lost.
      if (received === 4) sandbox.setFaults({ failNext: 2 });
    },
  });
  const { url } = await sandbox.start();

  const config = configSchema.parse({
    device_id: 'demo-device',
    api: { base_url: url, scac, timeout_s: 10 },
    buffer: { path: join(dir, 'buffer.db'), flush_interval_ms: 200 },
    schedule: { traces: '*/4 * * * * *', splay_s: 0 },
    sampling: { interval_s: 120 },
    delivery: { poll_interval_ms: 200, retry_initial_s: 0.5, retry_max_s: 2 },
    // The agent is given its simulator below (opts.sources); this entry only says what it is.
    sources: [simCfg],
  });
  const log = createLogger({ level: 'error' });
  let sim: SimulatorSource | undefined;
  const agent = new Agent({ file: '(demo)', config, deviceId: 'demo-device', warnings: [] }, { key, origin: 'demo' }, log, {
    sources: ({ intake }) => {
      sim = new SimulatorSource(simCfg, intake('simulator'));
      return [sim];
    },
    stateIntervalMs: 1000,
  });

  write(`telematics-agent demo`);
  write(`  sandbox  ${url} (SCAC ${scac})`);
  write(`  buffer   ${config.buffer.path}`);
  write(`  route    Chicago, IL -> Indianapolis, IN, ${Math.round(durationS / 60)} simulated minutes at ${opts.timeScale}x (about ${Math.round(durationS / opts.timeScale)} s)`);
  write(`  loads    ${LOAD} from Chicago, and ${LOAD2} picked up in Lafayette, IN on the way: one truck, two loads, both to Indianapolis`);
  // X12 214 status codes, as the milestone lines below show them.
  write('  codes    AB: the delivery appointment, recorded by hand before the start (it comes first); detected from positions: X3 arrived and AF departed at pick-up, X1 arrived and D1 departed at delivery');
  write('');

  const stops: Stop[] = [
    { sequence: 1, type: 'pickup', latitude: route[0].lat, longitude: route[0].lon, city: 'Chicago', state: 'IL', radiusM: 300 },
    {
      sequence: 2,
      type: 'delivery',
      latitude: route[last].lat,
      longitude: route[last].lon,
      city: 'Indianapolis',
      state: 'IN',
      radiusM: 300,
      appointment: { start: new Date(Date.now() - 3600_000).toISOString(), end: new Date(Date.now() + 3 * 3600_000).toISOString() },
    },
  ];
  // The load is assigned before the agent starts, so the first reading already belongs to it.
  const { Store } = await import('./buffer/store.js');
  const pre = Store.open(config.buffer.path);
  pre.startLoad({ loadNumber: LOAD, resourceId: RESOURCE, resourceType: 'Truck', stops, nowMs: startMs });
  recordMilestone(pre, config, { loadNumber: LOAD, code: 'AB', stop: 2, timeMs: Date.parse(stops[1].appointment!.start!) });
  pre.close();

  await agent.start();
  // AB was recorded by hand (an appointment); X3, AF, X1 and D1 are detected from positions,
  // for each load at its own stops (the Indianapolis dock is both loads' delivery).
  const expected: Record<string, string[]> = { [LOAD]: ['AB', 'X3', 'AF', 'X1', 'D1'], [LOAD2]: ['X3', 'AF', 'X1', 'D1'] };
  let finished = false;
  sim!.onEvent((e) => {
    if (e.type === 'arrive' && e.pointIndex === MIDWAY) {
      // The second shipment is loaded on the truck that carries the first: its window opens
      // now (by the truck's clock), and its traces hold only what comes from here.
      agent.store.startLoad({
        loadNumber: LOAD2,
        resourceId: RESOURCE,
        resourceType: 'Truck',
        stops: [
          { sequence: 1, type: 'pickup', latitude: route[MIDWAY].lat, longitude: route[MIDWAY].lon, city: 'Lafayette', state: 'IN', radiusM: 300 },
          // The same dock as the first load's delivery (without its appointment).
          { sequence: 2, type: 'delivery', latitude: route[last].lat, longitude: route[last].lon, city: 'Indianapolis', state: 'IN', radiusM: 300 },
        ],
        nowMs: e.timeMs,
      });
      write(`  load           ${LOAD2} started on ${RESOURCE} in Lafayette, IN; ${LOAD} stays on`);
    }
    if (e.type === 'end') {
      // The loads are over: what is buffered still goes out, including the tail sampling skipped.
      agent.ingest.flush();
      for (const l of [LOAD, LOAD2]) agent.store.endLoad(l, Date.now());
      finished = true;
    }
  });

  const deadline = Date.now() + (opts.timeoutS ?? Math.max(60, (durationS / opts.timeScale) * 3 + 30)) * 1000;
  let drained = false;
  while (Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 500));
    if (!finished) continue;
    agent.ingest.flush();
    const c = agent.store.counts();
    if (c.readings === 0 && c.pendingMilestones === 0) {
      drained = true;
      break;
    }
    // Once the route is done, do not wait for the next tick to push the rest.
    agent.sender.requestTracePush();
  }
  const counts = agent.store.counts();
  const committed = agent.ingest.stats.committed;
  await agent.stop();
  await sandbox.stop();

  const codes = (load: string) => sandbox.milestones.filter((m) => m.body.loadNumber === load).map((m) => m.body.eventCode);
  const orderOk = Object.entries(expected).every(([load, want]) => JSON.stringify(codes(load)) === JSON.stringify(want));
  const ok = drained && orderOk && sandbox.stats.invalid === 0 && sandbox.stats.unauthorized === 0;
  write('');
  write('summary');
  write(`  readings committed      ${committed} (each stored once, for every load whose window holds it)`);
  write(`  trace requests          ${sandbox.traces.length} accepted, ${sandbox.stats.tracePoints} points (sampled every ${config.sampling.interval_s} s)`);
  for (const load of [LOAD, LOAD2]) {
    const mine = sandbox.traces.filter((t) => t.body.loadNumber === load);
    write(`  ${`  ${load}`.padEnd(24)}${mine.length} requests, ${mine.reduce((n, t) => n + t.body.traces.length, 0)} points`);
  }
  for (const [load, want] of Object.entries(expected)) {
    const got = codes(load);
    const inOrder = JSON.stringify(got) === JSON.stringify(want);
    write(`  milestones ${load}  ${got.join(' ')}${inOrder ? ' (in order)' : ` (expected ${want.join(' ')})`}`);
  }
  write(`  faults injected         ${sandbox.stats.faults.failed} x 503, all retried`);
  write(`  rejected by sandbox     ${sandbox.stats.invalid} invalid, ${sandbox.stats.unauthorized} unauthorized`);
  write(`  duplicates              ${sandbox.stats.duplicateRequests} requests, ${sandbox.stats.duplicateTracePoints} trace points`);
  write(`  left in buffer          ${counts.readings} readings, ${counts.pendingMilestones} milestones${drained ? ' (all delivered)' : ' (NOT drained before the deadline)'}`);
  write(ok ? 'demo ok' : 'demo FAILED');
  if (opts.keep) write(`buffer kept in ${dir}`);
  else rmSync(dir, { recursive: true, force: true });
  return ok;
}
