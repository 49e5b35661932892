/**
 * Several loads on one truck, end to end: the real daemon, the real CLI, the real sandbox.
 * One truck carries two loads whose windows overlap: A is picked up at the Chicago dock and
 * delivered in Gary, B is picked up at the same dock (started while the truck is there) and
 * delivered in Indianapolis. Every request each load receives is checked: its points (those
 * of its window, each once), their stop numbers (its next stop, from its own departures), and
 * its milestones.
 */
import { describe, expect, it } from 'vitest';
import type { TraceBody } from '../src/api/schemas.js';
import { agentConfig, runCli, startDaemon, waitFor, writeFile, daemonFixture } from './helpers.js';

const DOCK = { lat: 41.8781, lon: -87.6298 }; // Chicago: both loads' pick-up
const GARY = { lat: 41.5934, lon: -87.3464 }; // A's delivery
const INDY = { lat: 39.7684, lon: -86.1581 }; // B's delivery
const ROAD = [
  { lat: 41.7, lon: -87.5 },
  { lat: 41.0, lon: -87.0 },
  { lat: 39.7, lon: -86.0 },
];

/** The truck: a fix every 200 ms, stamped now, wherever the test has put it (a file). */
const SOURCE = `import { readFileSync } from 'node:fs';
export function createSource(ctx, options) {
  let timer;
  let n = 0;
  return {
    start() {
      timer = setInterval(() => {
        let at;
        try { at = JSON.parse(readFileSync(options.where, 'utf8')); } catch { return; }
        n += 1;
        ctx.emit({ resourceId: 'TRUCK-1', timeMs: Date.now(), lat: at.lat + (n % 3) * 1e-6, lon: at.lon });
      }, 200);
    },
    stop() { clearInterval(timer); },
  };
}
`;

const fx = daemonFixture();

describe('one truck, two loads with overlapping windows (real daemon, CLI and sandbox)', () => {
  it('each load gets the points of its own window with its own stop numbers, and its own milestones', async () => {
    const { url } = await fx.sandbox.start();
    const where = writeFile(fx.tmp.dir, 'where.json', JSON.stringify(DOCK));
    const source = writeFile(fx.tmp.dir, 'truck.mjs', SOURCE);
    const cfg = agentConfig(
      fx.tmp.dir,
      url,
      `[[sources]]
type = "module"
name = "truck"
path = "${source}"
options = { where = "${where}" }
[milestones]
dwell_s = 1
min_fixes = 3
[milestones.delay]
enabled = false
`,
      { traces: '* * * * * *', sampling: 0 },
    );
    const cli = async (...args: string[]) => {
      const r = await runCli([...args, '--config', cfg]);
      expect(r.code, r.stderr).toBe(0);
      return r;
    };
    const stops = (name: string, delivery: { lat: number; lon: number }) =>
      writeFile(
        fx.tmp.dir,
        name,
        JSON.stringify([
          { sequence: 1, type: 'pickup', latitude: DOCK.lat, longitude: DOCK.lon, radiusM: 300 },
          { sequence: 2, type: 'delivery', latitude: delivery.lat, longitude: delivery.lon, radiusM: 300 },
        ]),
      );
    const moveTo = (p: { lat: number; lon: number }) => writeFile(fx.tmp.dir, 'where.json', JSON.stringify(p));
    const codes = (load: string) => fx.sandbox.milestones.filter((m) => m.body.loadNumber === load).map((m) => `${m.body.eventCode}@${m.body.stopsequenceNumber}`);
    const reached = (load: string, ...expected: string[]) => waitFor(() => JSON.stringify(codes(load)) === JSON.stringify(expected), 30_000, `${load}: ${expected.join(' ')}`);

    fx.daemon = startDaemon(['--config', cfg]);
    await fx.daemon!.started('the daemon');
    await cli('load', 'start', 'L-A', '--resource', 'TRUCK-1', '--stops', stops('a.json', GARY));
    await reached('L-A', 'X3@1');
    // B joins the truck at the same dock while A is on it: its own arrival there.
    await cli('load', 'start', 'L-B', '--resource', 'TRUCK-1', '--stops', stops('b.json', INDY));
    await reached('L-B', 'X3@1');
    moveTo(ROAD[0]);
    await reached('L-A', 'X3@1', 'AF@1');
    await reached('L-B', 'X3@1', 'AF@1');
    moveTo(GARY);
    await reached('L-A', 'X3@1', 'AF@1', 'X1@2');
    moveTo(ROAD[1]);
    await reached('L-A', 'X3@1', 'AF@1', 'X1@2', 'D1@2');
    await cli('load', 'end', 'L-A');
    moveTo(INDY);
    await reached('L-B', 'X3@1', 'AF@1', 'X1@2');
    moveTo(ROAD[2]);
    await reached('L-B', 'X3@1', 'AF@1', 'X1@2', 'D1@2');
    await cli('load', 'end', 'L-B');
    // Everything the truck reported in either window, delivered.
    await waitFor(
      async () => {
        const s = JSON.parse((await runCli(['status', '--json', '--config', cfg])).stdout) as { queue: { readings: number; pendingMilestones: number } };
        return s.queue.readings === 0 && s.queue.pendingMilestones === 0;
      },
      30_000,
      'the buffer drained',
    );
    expect(await fx.daemon.stop('SIGTERM')).toEqual({ code: 0, signal: null });

    const loads = JSON.parse((await cli('load', 'list', '--all', '--json')).stdout) as Array<{ loadNumber: string; windowFromMs: number; windowUntilMs: number; backlog: number }>;
    const window = Object.fromEntries(loads.map((l) => [l.loadNumber, l]));
    expect(loads.map((l) => [l.loadNumber, l.backlog])).toEqual([
      ['L-A', 0],
      ['L-B', 0],
    ]);
    // The windows overlap: B started before A ended.
    expect(window['L-B'].windowFromMs).toBeLessThan(window['L-A'].windowUntilMs);

    // Milestones: exactly these, each naming its load.
    expect(codes('L-A')).toEqual(['X3@1', 'AF@1', 'X1@2', 'D1@2']);
    expect(codes('L-B')).toEqual(['X3@1', 'AF@1', 'X1@2', 'D1@2']);
    expect(fx.sandbox.milestones).toHaveLength(8);
    /** A load's departures: when they happened, and when the service had them. */
    const departures = (load: string) =>
      fx.sandbox.milestones
        .filter((m) => m.body.loadNumber === load && ['AF', 'D1'].includes(m.body.eventCode))
        .map((m) => ({ stop: m.body.stopsequenceNumber!, at: Date.parse(m.body.time.dateTime), received: m.at }));
    /**
     * The next stop of a load at a point: the first after the last stop it had left by the
     * point's time. A departure is known once detected (a few fixes after the fact), and a
     * trace request the service got before the departure went out with the stop known then;
     * milestones go first, so every request after it carries the new stop.
     */
    const nextStop = (load: string, at: number, received: number) => {
      const left = Math.max(
        0,
        ...departures(load)
          .filter((d) => d.at <= at && d.received <= received)
          .map((d) => d.stop),
      );
      return [1, 2].find((s) => s > left);
    };

    // Every trace request: a load's, the truck's points, a place.
    const requests = fx.sandbox.traces.map((t) => t.body as TraceBody);
    expect(new Set(requests.map((b) => b.loadNumber))).toEqual(new Set(['L-A', 'L-B']));
    for (const b of requests) {
      expect(b.eventState).toMatch(/^(IL|IN)$/);
      for (const p of b.traces) expect(p).toMatchObject({ resourceId: 'TRUCK-1', resourceType: 'Truck' });
    }
    const points = (load: string) =>
      fx.sandbox.traces
        .filter((t) => t.body.loadNumber === load)
        .flatMap((t) => t.body.traces.map((p) => ({ id: p.references!.find((r) => r.name === 'traceId')!.value, at: Date.parse(p.time.dateTime), stop: p.stopsequenceNumber, received: t.at })));
    const a = points('L-A');
    const b = points('L-B');
    // Each point once per load; none outside the load's window.
    for (const [load, pts] of [
      ['L-A', a],
      ['L-B', b],
    ] as const) {
      expect(new Set(pts.map((p) => p.id)).size, load).toBe(pts.length);
      const w = window[load];
      expect(
        pts.filter((p) => p.at < w.windowFromMs || p.at >= w.windowUntilMs),
        load,
      ).toEqual([]);
      // Its next stop at each point: 1 until it left its pick-up, 2 until it left its delivery, then none.
      expect(
        pts.filter((p) => p.stop !== nextStop(load, p.at, p.received)),
        load,
      ).toEqual([]);
      expect(new Set(pts.map((p) => p.stop))).toEqual(new Set([1, 2, undefined]));
    }
    // The overlap: the same readings went to both loads (stored once, sent to each).
    const inA = new Set(a.map((p) => p.id));
    const inB = new Set(b.map((p) => p.id));
    const shared = b.filter((p) => p.at < window['L-A'].windowUntilMs);
    expect(shared.length).toBeGreaterThan(5);
    expect(shared.filter((p) => !inA.has(p.id))).toEqual([]);
    expect(a.filter((p) => p.at >= window['L-B'].windowFromMs && !inB.has(p.id))).toEqual([]);
    // B's points go on to Indianapolis after A ended.
    expect(b.filter((p) => p.at >= window['L-A'].windowUntilMs).length).toBeGreaterThan(5);
    expect(fx.sandbox.stats).toMatchObject({ duplicateRequests: 0, duplicateTracePoints: 0, invalid: 0 });
  }, 120_000);
});
