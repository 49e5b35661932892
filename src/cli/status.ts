/**
 * `status`: what an operator asks first. Read from the buffer (queue depths, loads) and the
 * state row the daemon writes every minute and at once on a change of delivery's, a source's
 * health or the clock's state (docs/operations.md), so it works without talking to the
 * daemon and tells when it is gone; a source's counts can be a minute behind its newest fix,
 * which comes from the buffer.
 */
import { DAEMON_STATE_KEY, type DaemonState, STATE_INTERVAL_MS } from '../daemon-state.js';
import { dropCounters } from '../buffer/bounds.js';
import { lateSince, lateUntil } from '../buffer/ledger.js';
import type { LastFix, Store } from '../buffer/store.js';
import { deviceZone, describeDeviceZone } from '../geo/device-zone.js';
import { formatStep } from '../clock.js';
import { LATENCY_MS } from '../gnss-clock.js';
import { fixAgeS, fixAgeText, fixAhead } from '../fix-age.js';
import { VERSION } from '../version.js';

export interface StatusReport {
  /** This command's version; `daemon.version` is the daemon's (they differ after an upgrade until a restart). */
  version: string;
  deviceId: string;
  configFile: string;
  buffer: string;
  daemon: {
    running: boolean;
    pid: number | null;
    version: string | null;
    startedMs: number | null;
    stateUpdatedMs: number | null;
    note: string;
    /** Where the running daemon's key came from (never the key): what a refused key's hint names. */
    keyOrigin: string | null;
  };
  queue: ReturnType<Store['counts']>;
  /** Readings dropped by the buffer's limits, since the buffer was created. */
  dropped: Record<string, number>;
  delivery: DaemonState['sender'] | null;
  nextTracePushMs: number | null;
  /** Every active load, by resource (a resource may carry several), with the readings it still has to send. */
  activeLoads: Array<{ loadNumber: string; resourceId: string; resourceType: string; nextStop: number | null; startedMs: number; backlog: number }>;
  /** Ended loads still taking late readings of their window (loads.late_readings_s), until lateUntilMs, the first ended first. */
  lateLoads: Array<{ loadNumber: string; resourceId: string; resourceType: string; endedMs: number; lateUntilMs: number; backlog: number }>;
  sources: DaemonState['sources'];
  /**
   * The last fix of each resource (what a milestone without a position of its own uses), newest
   * first. `aheadS` only for a fix dated after now (the clock stepped back): by how much; its `ageS` is 0.
   */
  lastFixes: Array<LastFix & { ageS: number; aheadS?: number }>;
  /** Readings are not being committed (the disk is full, or commits fail), as the daemon last reported. */
  commits: DaemonState['ingest']['trouble'] | null;
  disk: DaemonState['disk'] | null;
  clockJump: DaemonState['clockJump'] | null;
  /** The driver's page of the running daemon, when `ui.listen` is set: where, or why it is not running. */
  page: DaemonState['page'] | null;
  /** The fleet link of the running daemon, when `[fleet]` is set: up, or why not. */
  fleet: DaemonState['fleet'] | null;
  /** The system clock as the running daemon sees it: synchronised, or GNSS time used, or neither (null: no daemon runs). */
  clock: DaemonState['clock'] | null;
  /** This machine's zone (what a milestone of now with no place and no fix is written in) and where it came from. */
  deviceZone: { zone: string; from: string };
  /** What the config does with readings of a resource with no load (privacy.record_without_load, loads.keep_unassigned_s). */
  withoutLoad?: { recorded: boolean; keepS: number };
}

export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

export function buildStatus(store: Store, info: { deviceId: string; configFile: string; buffer: string; lateReadingsS?: number; withoutLoad?: StatusReport['withoutLoad'] }, nowMs = Date.now()): StatusReport {
  const state = store.getState<DaemonState>(DAEMON_STATE_KEY)?.value;
  let running = false;
  let note = 'the daemon has never run with this buffer';
  if (state) {
    const age = nowMs - state.updatedMs;
    if (!state.running) note = `stopped cleanly at ${new Date(state.updatedMs).toISOString()}`;
    else if (!pidAlive(state.pid)) note = `not running: pid ${state.pid} is gone (last seen ${new Date(state.updatedMs).toISOString()}; it did not stop cleanly)`;
    else if (age > 3 * STATE_INTERVAL_MS) note = `pid ${state.pid} exists but has not updated its state for ${Math.round(age / 1000)} s (hung?)`;
    else {
      running = true;
      note = `running (pid ${state.pid})`;
    }
  }
  const clock = running ? (state?.clock ?? null) : null;
  const dataNowMs = readingsNow(clock, nowMs);
  return {
    version: VERSION,
    deviceId: state?.deviceId ?? info.deviceId,
    configFile: info.configFile,
    buffer: info.buffer,
    daemon: { running, pid: state?.pid ?? null, version: state?.version ?? null, startedMs: state?.startedMs ?? null, stateUpdatedMs: state?.updatedMs ?? null, note, keyOrigin: state?.keyOrigin ?? null },
    queue: store.counts(),
    dropped: dropCounters(store.counters(), running ? (state?.ingest.droppedUncounted ?? 0) : 0),
    delivery: state?.sender ?? null,
    nextTracePushMs: running ? (state?.nextTracePushMs ?? null) : null,
    activeLoads: activeLoads(store),
    lateLoads: lateLoads(store, (info.lateReadingsS ?? 0) * 1000, nowMs),
    sources: state?.sources ?? [],
    // A fix dated after now (the clock stepped back) is 0 s old and says by how much it is ahead.
    lastFixes: store.lastFixes().map((f) => ({ ...f, ageS: fixAgeS(dataNowMs, f.timeMs), ...(fixAhead(dataNowMs, f.timeMs) ? { aheadS: Math.round((f.timeMs - dataNowMs) / 1000) } : {}) })),
    commits: running ? (state?.ingest.trouble ?? null) : null,
    disk: state?.disk ?? null,
    clockJump: state?.clockJump ?? null,
    page: running ? (state?.page ?? null) : null,
    fleet: running ? (state?.fleet ?? null) : null,
    clock,
    deviceZone: { zone: deviceZone().zone, from: deviceZone().from },
    ...(info.withoutLoad ? { withoutLoad: info.withoutLoad } : {}),
  };
}

/** The active loads grouped by resource (resources in order, each one's loads oldest first), with their backlogs. */
function activeLoads(store: Store): StatusReport['activeLoads'] {
  const loads = store.listLoads(false).sort((a, b) => (a.resourceId < b.resourceId ? -1 : a.resourceId > b.resourceId ? 1 : a.startedMs - b.startedMs));
  const backlogs = store.backlogs(loads.map((l) => l.loadNumber));
  return loads.map((l) => ({
    loadNumber: l.loadNumber,
    resourceId: l.resourceId,
    resourceType: l.resourceType,
    nextStop: l.nextStop,
    startedMs: l.startedMs,
    backlog: backlogs.get(l.loadNumber) ?? 0,
  }));
}

/** The ended loads whose late readings still join them: ended less than `lateMs` ago. */
function lateLoads(store: Store, lateMs: number, nowMs: number): StatusReport['lateLoads'] {
  if (lateMs <= 0) return [];
  const loads = store.endedSince(lateSince(nowMs, lateMs));
  const backlogs = store.backlogs(loads.map((l) => l.loadNumber));
  return loads.map((l) => ({
    loadNumber: l.loadNumber,
    resourceId: l.resourceId,
    resourceType: l.resourceType,
    endedMs: l.endedMs!,
    lateUntilMs: lateUntil(l.endedMs!, lateMs),
    backlog: backlogs.get(l.loadNumber) ?? 0,
  }));
}

/**
 * Now on the clock of the readings' times: they carry GNSS time while the daemon runs on it
 * (src/gnss-clock.ts), whereas the daemon's own stamps (pushes, errors) are on the system
 * clock. Each age is taken from its own clock's now; a fix seconds old is not "in 11 h".
 */
function readingsNow(clock: StatusReport['clock'], nowMs: number): number {
  const off = clock?.state === 'gnss' ? (clock.offsetMs ?? 0) : 0;
  return Math.abs(off) >= LATENCY_MS ? nowMs + off : nowMs;
}

/** `2026-11-26 11:59:30Z`. */
function stamp(ms: number): string {
  return new Date(ms)
    .toISOString()
    .replace('T', ' ')
    .replace(/\.\d+Z$/, 'Z');
}

function ago(ms: number | null | undefined, nowMs: number): string {
  if (ms === null || ms === undefined) return 'never';
  const s = Math.round((nowMs - ms) / 1000);
  const when = stamp(ms);
  if (s < 0) return `${when} (in ${formatDuration(-s)})`;
  return `${when} (${formatDuration(s)} ago)`;
}

export function formatDuration(s: number): string {
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

export function formatStatus(r: StatusReport, nowMs = Date.now()): string {
  const dataNowMs = readingsNow(r.clock, nowMs);
  const lines: string[] = [];
  // A row without a key continues the one above it: no colon of its own.
  const row = (k: string, v: string) => lines.push(`${(k ? `${k}:` : '').padEnd(14)}${v}`);
  row('device', r.deviceId);
  const daemonVersion = r.daemon.running && r.daemon.version && r.daemon.version !== r.version ? ` (the daemon running is ${r.daemon.version}: restart it to run this one)` : '';
  row('version', `${r.version}${daemonVersion}`);
  row('config', r.configFile);
  row('buffer', r.buffer);
  row('device zone', describeDeviceZone(r.deviceZone));
  row('daemon', r.daemon.note);
  const q = r.queue;
  row('queue', `${q.readings} readings${q.oldestReadingMs ? ` (oldest ${ago(q.oldestReadingMs, dataNowMs)})` : ''}, ${q.pendingMilestones} milestones pending, ${q.sentMilestones} sent`);
  if (q.unassignedReadings) row('', `${q.unassignedReadings} readings kept without a load (loads.keep_unassigned_s, privacy.record_without_load)`);
  if (q.deadLetters) row('dead letters', `${q.deadLetters} refused by the service (see "dead-letter list")`);
  const c = r.commits;
  if (c) {
    const what = c.kind === 'disk-full' ? 'DISK FULL' : 'COMMITS FAIL';
    row(
      what,
      `readings not committed since ${ago(c.sinceMs, nowMs)}: ${r.delivery ? '' : ''}${c.attempts} attempt(s), next ${ago(c.nextAttemptMs, nowMs)}; waiting in memory, delivery goes on (${c.lastError})`,
    );
  }
  if (r.disk && r.disk.reserveBytes > 0 && !r.disk.reserve) row('', `the ${Math.round(r.disk.reserveBytes / 1024)} KB reserve for a full disk is not in place (written again once there is room)`);
  if (r.clock) row('system clock', clockLine(r.clock));
  if (r.page) row('driver page', r.page.error ? `NOT RUNNING on ${r.page.listen}: ${r.page.error}; tried again, at least once a minute` : `${r.page.listen} (port ${r.page.port})`);
  if (r.fleet)
    row('fleet link', r.fleet.connected ? `connected to ${r.fleet.url} as ${r.fleet.clientId}` : `NOT CONNECTED to ${r.fleet.url}${r.fleet.error ? `: ${r.fleet.error}` : ''}; trying again with backoff`);
  if (r.clockJump) row('clock', `the system clock jumped ${Math.round(r.clockJump.ms / 3_600_000)} h at ${ago(r.clockJump.atMs, nowMs)}; no reading was dropped for its age then`);
  const dropped = Object.entries(r.dropped).filter(([k, v]) => k.startsWith('readings_dropped') && v > 0);
  if (dropped.length) row('dropped', dropped.map(([k, v]) => `${v} readings (${k.replace('readings_dropped_', '').replace('_', ' ')})`).join(', '));
  const d = r.delivery;
  const key = r.daemon.keyOrigin ? `the key (from ${r.daemon.keyOrigin})` : 'the key';
  if (d?.paused) row('PAUSED', `${d.paused}; data is kept. Fix ${key} or the config, then: systemctl reload telematics-agent`);
  for (const [load, w] of Object.entries(d?.refusedLoads ?? {})) {
    row('REFUSED', `load ${load}: ${w.reason}; its traces wait (${w.points} points parked as dead letter ${w.deadLetter}), tried again ${ago(w.nextTryMs, nowMs)}`);
  }
  row('last success', ago(d?.lastSuccessMs, nowMs));
  row('last push', ago(d?.lastTracePushMs, nowMs));
  if (d?.lastAnswer) row('last answer', `${d.lastAnswer} ${ago(d.lastAnswerMs, nowMs)}`);
  if (r.nextTracePushMs) row('next push', ago(r.nextTracePushMs, nowMs));
  if (d?.lastError && (d.lastErrorMs ?? 0) >= (d.lastSuccessMs ?? 0)) {
    row('last error', `${d.lastError} [${d.lastErrorClass}] at ${ago(d.lastErrorMs, nowMs)}`);
    if (d.nextAttemptMs) row('next attempt', ago(d.nextAttemptMs, nowMs));
  } else {
    row('last error', d?.lastError ? `none since the last success (earlier: ${d.lastError})` : 'none');
  }
  if (d) row('sent', `${d.sent.milestones} milestones, ${d.sent.traceRequests} trace requests (${d.sent.tracePoints} points) since start`);
  if (r.activeLoads.length === 0) row('active loads', `none (${withoutLoadText(r.withoutLoad)})`);
  // One row per resource: every load it carries, each with what it still has to send.
  const byResource = new Map<string, StatusReport['activeLoads']>();
  for (const l of r.activeLoads) byResource.set(l.resourceId, [...(byResource.get(l.resourceId) ?? []), l]);
  for (const [i, [resource, loads]] of [...byResource].entries()) {
    const each = loads.map((l) => `${l.loadNumber} (${l.resourceType}${l.nextStop ? `, next stop ${l.nextStop}` : ''}, ${l.backlog} reading${l.backlog === 1 ? '' : 's'} to send)`);
    row(i === 0 ? 'active loads' : '', `${resource}: ${each.join(', ')}`);
  }
  for (const [i, l] of r.lateLoads.entries()) {
    const what = `${l.loadNumber} (ended ${ago(l.endedMs, nowMs)}, takes late readings of its window until ${ago(l.lateUntilMs, nowMs)}, ${l.backlog} reading${l.backlog === 1 ? '' : 's'} to send)`;
    row(i === 0 ? 'ended loads' : '', `${l.resourceId}: ${what}`);
  }
  if (r.lastFixes.length === 0) row('last fix', 'none yet');
  for (const [i, f] of r.lastFixes.entries()) {
    // A fix dated after now (the clock stepped back) is not "in 59 min": say it is ahead.
    const at = fixAhead(dataNowMs, f.timeMs) ? `${stamp(f.timeMs)} (${fixAgeText(dataNowMs, f.timeMs)})` : ago(f.timeMs, dataNowMs);
    row(i === 0 ? 'last fix' : '', `${f.resourceId} ${f.lat.toFixed(5)}, ${f.lon.toFixed(5)} at ${at}`);
  }
  if (r.sources.length === 0) row('sources', 'none reported');
  for (const [i, s] of r.sources.entries()) {
    row(
      i === 0 ? 'sources' : '',
      `${s.name} [${s.type}] ${s.healthy ? 'healthy' : 'UNHEALTHY'}, ${s.readings} readings, ${s.rejected} rejected, last ${ago(s.lastReadingMs, dataNowMs)}${s.detail ? `, ${s.detail}` : ''}`,
    );
  }
  return lines.join('\n');
}

/** What becomes of readings while a resource has no load: said of the config, not assumed off. */
function withoutLoadText(w: StatusReport['withoutLoad']): string {
  if (w?.recorded) return 'readings without a load are kept: privacy.record_without_load';
  if (w && w.keepS > 0) return `readings without a load are kept ${formatDuration(w.keepS)} for a load started --from, then dropped: loads.keep_unassigned_s`;
  return 'readings are not kept without a load';
}

/** `synchronised (the kernel (timedatectl))`, `not synchronised (...); GNSS time is +12 h 0 min from it, used instead`. */
function clockLine(c: NonNullable<StatusReport['clock']>): string {
  if (c.state === 'synchronised') return `synchronised (${c.from})`;
  const expired = c.heldExpired ? `; ${c.heldExpired} readings kept with its time (no GNSS time came)` : '';
  if (c.state === 'gnss') return `not synchronised (${c.from}); GNSS time is ${formatStep(c.offsetMs ?? 0)} from it and is used${expired}`;
  return `not synchronised (${c.from}); no GNSS time yet${c.held ? `, ${c.held} readings wait for one` : ''}${expired}`;
}
