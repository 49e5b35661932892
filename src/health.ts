/**
 * Optional loopback endpoint for monitoring (off by default: `health.listen`).
 *   /healthz  200 "ok", or 503 with the reasons: the last successful push is older than twice
 *             the push interval while data waits, delivery is paused (key refused), a
 *             load's traces wait because the service refuses every request of it, or a
 *             source is unhealthy or silent for `health.source_silent_s`, or readings were kept
 *             with the time of a clock not synchronised (no GNSS time came).
 *   /metrics  Prometheus text: the version (build_info), queue depths, oldest unsent age,
 *             pushes by class, dead letters, dropped readings, source health, last fix age,
 *             buffer size, the clock's state and its offset from GNSS time.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import type { Agent } from './agent.js';
import { dropCounters } from './buffer/bounds.js';
import { VERSION } from './version.js';

export function healthProblems(agent: Agent, nowMs = Date.now()): string[] {
  const problems: string[] = [];
  const s = agent.sender.status;
  const counts = agent.store.counts();
  const waiting = counts.readings > 0 || counts.pendingMilestones > 0;
  const interval = agent.pushIntervalMs();
  const since = s.lastSuccessMs ?? agent.startedAt;
  if (waiting && nowMs - since > 2 * interval) {
    problems.push(`no successful push for ${Math.round((nowMs - since) / 1000)} s while data waits (push interval ${Math.round(interval / 1000)} s)`);
  }
  if (s.paused) problems.push(`delivery paused: ${s.paused}`);
  for (const [load, w] of Object.entries(s.refusedLoads ?? {})) problems.push(`traces of load ${load} wait: ${w.reason}`);
  const trouble = agent.ingest.stats.trouble;
  if (trouble) {
    const since = Math.round((nowMs - trouble.sinceMs) / 1000);
    problems.push(
      trouble.kind === 'disk-full'
        ? `disk full: readings not committed for ${since} s, ${agent.ingest.stats.pending} waiting in memory (buffer.max_pending ${agent.config.buffer.max_pending}), ${agent.ingest.stats.droppedPending} dropped; delivery goes on and makes room`
        : `readings not committed for ${since} s: ${trouble.lastError}`,
    );
  }
  const clock = agent.clockState();
  if (clock.state !== 'synchronised' && clock.heldExpired > 0) {
    problems.push(`system clock not synchronised (${clock.from}) and no GNSS time came: ${clock.heldExpired} readings kept with the system clock's time`);
  }
  const page = agent.pageView();
  if (page?.error) problems.push(`driver page not running on ${page.listen}: ${page.error} (tried again, at least once a minute)`);
  const silentMs = agent.config.health.source_silent_s * 1000;
  for (const src of agent.sources) {
    const h = src.health();
    if (!h.healthy) problems.push(`source ${src.name} unhealthy${h.detail ? `: ${h.detail}` : ''}`);
    else if (!h.finished && nowMs - (h.lastReadingMs ?? agent.startedAt) > silentMs && nowMs - agent.startedAt > silentMs) {
      problems.push(`source ${src.name} silent for more than ${agent.config.health.source_silent_s} s`);
    }
  }
  return problems;
}

const esc = (v: string) => v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');

export function metricsText(agent: Agent, nowMs = Date.now()): string {
  const lines: string[] = [];
  const metric = (name: string, type: 'gauge' | 'counter', help: string, samples: Array<[Record<string, string>, number]>) => {
    lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
    for (const [labels, v] of samples) {
      const l = Object.entries(labels)
        .map(([k, x]) => `${k}="${esc(x)}"`)
        .join(',');
      lines.push(`${name}${l ? `{${l}}` : ''} ${Number.isFinite(v) ? v : 0}`);
    }
  };
  metric('telematics_agent_build_info', 'gauge', "The agent's version, as a label; always 1.", [[{ version: VERSION }, 1]]);
  const c = agent.store.counts();
  const s = agent.sender.status;
  metric('telematics_queue_readings', 'gauge', 'Readings waiting to be sent.', [[{}, c.readings]]);
  metric('telematics_queue_milestones', 'gauge', 'Milestones waiting to be sent.', [[{}, c.pendingMilestones]]);
  metric('telematics_oldest_unsent_seconds', 'gauge', 'Age of the oldest unsent reading.', [[{}, c.oldestReadingMs ? (nowMs - c.oldestReadingMs) / 1000 : 0]]);
  metric('telematics_dead_letters', 'gauge', 'Records refused by the service and parked.', [[{}, c.deadLetters]]);
  metric('telematics_pushes_total', 'counter', 'Requests by outcome class.', [
    [{ class: 'delivered' }, s.sent.milestones + s.sent.traceRequests],
    ...Object.entries(s.failures).map(([k, v]): [Record<string, string>, number] => [{ class: k }, v]),
  ]);
  metric('telematics_trace_points_sent_total', 'counter', 'Trace points delivered since start.', [[{}, s.sent.tracePoints]]);
  metric('telematics_milestones_sent_total', 'counter', 'Milestones delivered since start.', [[{}, s.sent.milestones]]);
  metric('telematics_duplicates_total', 'counter', 'Records the service already had (HTTP 409), counted as delivered.', [[{}, s.duplicates]]);
  metric('telematics_disk_full', 'gauge', '1 while readings cannot be committed for lack of room.', [[{}, agent.ingest.stats.trouble?.kind === 'disk-full' ? 1 : 0]]);
  metric('telematics_readings_pending', 'gauge', 'Readings accepted and not yet committed.', [[{}, agent.ingest.stats.pending]]);
  metric('telematics_last_success_timestamp_seconds', 'gauge', 'Time of the last 2xx.', [[{}, (s.lastSuccessMs ?? 0) / 1000]]);
  metric('telematics_delivery_paused', 'gauge', '1 while the service refuses the key, SCAC or address.', [[{}, s.paused ? 1 : 0]]);
  metric(
    'telematics_readings_dropped_total',
    'counter',
    'Readings dropped: by the buffer limits, and temperatures with no fix to place them (no_fix).',
    Object.entries(dropCounters(agent.store.counters(), agent.ingest.stats.droppedUncounted)).map(([k, v]): [Record<string, string>, number] => [{ reason: k.replace('readings_dropped_', '') }, v]),
  );
  metric('telematics_buffer_bytes', 'gauge', 'Bytes of buffer data in use.', [[{}, agent.store.usedBytes()]]);
  const clock = agent.clockState();
  metric(
    'telematics_clock_state',
    'gauge',
    '1 for the state the system clock is in: synchronised, gnss (not synchronised, GNSS time used) or unsynchronised.',
    (['synchronised', 'gnss', 'unsynchronised'] as const).map((st) => [{ state: st }, clock.state === st ? 1 : 0]),
  );
  metric('telematics_clock_gnss_offset_seconds', 'gauge', 'GNSS time minus system time at the newest fix (0 before one).', [[{}, (clock.offsetMs ?? 0) / 1000]]);
  metric('telematics_clock_held_readings', 'gauge', 'Readings stamped by the system clock waiting for a GNSS time.', [[{}, clock.held]]);
  const sources = agent.sources.map((src) => ({ name: src.name, type: src.type, h: src.health() }));
  metric(
    'telematics_source_healthy',
    'gauge',
    '1 when the source is healthy.',
    sources.map((x) => [{ source: x.name, type: x.type }, x.h.healthy ? 1 : 0]),
  );
  metric(
    'telematics_source_readings_total',
    'counter',
    'Readings emitted by the source.',
    sources.map((x) => [{ source: x.name }, x.h.readings]),
  );
  metric(
    'telematics_source_rejected_total',
    'counter',
    'Bad inputs counted by the source.',
    sources.map((x) => [{ source: x.name }, x.h.rejected]),
  );
  metric(
    'telematics_source_last_reading_age_seconds',
    'gauge',
    "Seconds since the source's last reading (last fix age for position sources).",
    sources.map((x) => [{ source: x.name }, x.h.lastReadingMs ? (nowMs - x.h.lastReadingMs) / 1000 : -1]),
  );
  return `${lines.join('\n')}\n`;
}

export class HealthServer {
  private server: Server | undefined;
  constructor(private readonly agent: Agent) {}

  async start(listen: string): Promise<number> {
    const i = listen.lastIndexOf(':');
    const host = listen.slice(0, i).replace(/^\[|\]$/g, '');
    const port = Number(listen.slice(i + 1));
    const server = createServer((req, res) => {
      try {
        if (req.url === '/healthz') {
          const problems = healthProblems(this.agent);
          res.writeHead(problems.length ? 503 : 200, { 'content-type': 'text/plain' });
          res.end(problems.length ? `unhealthy\n${problems.join('\n')}\n` : 'ok\n');
        } else if (req.url === '/metrics') {
          res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' });
          res.end(metricsText(this.agent));
        } else {
          res.writeHead(404, { 'content-type': 'text/plain' });
          res.end('not found: try /healthz or /metrics\n');
        }
      } catch (err) {
        res.writeHead(500, { 'content-type': 'text/plain' });
        res.end(`${(err as Error).message}\n`);
      }
    });
    this.server = server;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => resolve());
    });
    return (server.address() as AddressInfo).port;
  }

  async stop(): Promise<void> {
    const s = this.server;
    this.server = undefined;
    if (!s) return;
    s.closeAllConnections();
    await new Promise<void>((r) => s.close(() => r()));
  }
}

/**
 * The daemon's health endpoint as configured: listening on `health.listen` (off when empty),
 * moved when a reload changes it; a listen that fails is logged and the agent runs without it.
 */
export class HealthEndpoint {
  private server: HealthServer | undefined;
  /** The `health.listen` it was last given. */
  address = '';
  /** Port of the endpoint when it is on. */
  port: number | undefined;

  constructor(private readonly agent: Agent) {}

  /** Listen on `listen` (nothing to do when it is the address already in use). */
  async listen(listen: string, log: Logger): Promise<void> {
    if (this.server && listen === this.address) return;
    await this.stop();
    this.address = listen;
    if (!listen) return;
    const server = new HealthServer(this.agent);
    try {
      this.port = await server.start(listen);
      this.server = server;
    } catch (err) {
      log.error({ listen, err: (err as Error).message }, 'health endpoint could not listen; running without it');
    }
  }

  async stop(): Promise<void> {
    const s = this.server;
    this.server = undefined;
    this.port = undefined;
    await s?.stop();
  }
}
