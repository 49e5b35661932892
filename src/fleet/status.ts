/**
 * The retained `<prefix>/status` the operations desk reads: the daemon's health as `status`
 * and /healthz tell it on the device (healthProblems is /healthz's own list), in one message.
 */
import type { Agent } from '../agent.js';
import { fixAgeS } from '../fix-age.js';
import { placeAt } from '../geo/places.js';
import { healthProblems } from '../health.js';
import { packageVersion } from '../paths.js';
import type { FleetStatus } from './messages.js';

const iso = (ms: number | null | undefined) => (ms === null || ms === undefined ? null : new Date(ms).toISOString());

/** OK, DEGRADED (what /healthz answers 503 for) or PAUSED (the service refuses the key, SCAC or path). */
export function stateOf(agent: Agent, problems: string[]): 'OK' | 'DEGRADED' | 'PAUSED' {
  if (agent.sender.status.paused) return 'PAUSED';
  return problems.length > 0 ? 'DEGRADED' : 'OK';
}

/**
 * What changes the state, read from memory only (no count of the buffer): looked at every few
 * seconds, and a new status goes out when it differs.
 */
export function stateKey(agent: Agent): string {
  const s = agent.sender.status;
  const failing = s.lastError !== null && (s.lastErrorMs ?? 0) >= (s.lastSuccessMs ?? 0);
  const sources = agent.sources.map((src) => (src.health().healthy ? 1 : 0)).join('');
  return [s.paused ?? '', Object.keys(s.refusedLoads ?? {}).join(','), agent.ingest.stats.trouble?.kind ?? '', failing ? 'failing' : '', sources].join('|');
}

export function fleetStatus(agent: Agent, deviceId: string, nowMs = Date.now()): FleetStatus {
  const problems = healthProblems(agent, nowMs);
  const store = agent.store;
  const counts = store.counts();
  const loads = store.listLoads(false);
  const backlogs = store.backlogs(loads.map((l) => l.loadNumber));
  const s = agent.sender.status;
  const failing = s.lastError !== null && (s.lastErrorMs ?? 0) >= (s.lastSuccessMs ?? 0);
  const daemon = agent.state(true);
  const clock = agent.clockState();
  return {
    online: true,
    deviceId,
    version: packageVersion(),
    time: new Date(nowMs).toISOString(),
    state: stateOf(agent, problems),
    problems,
    startedAt: new Date(agent.startedAt).toISOString(),
    loads: loads.map((l) => ({ loadNumber: l.loadNumber, resourceId: l.resourceId, resourceType: l.resourceType, backlog: backlogs.get(l.loadNumber) ?? 0 })),
    oldestUndeliveredAgeS: counts.oldestReadingMs === null ? null : Math.round((nowMs - counts.oldestReadingMs) / 1000),
    pendingMilestones: counts.pendingMilestones,
    deadLetters: counts.deadLetters,
    lastPush: {
      at: iso(s.lastTracePushMs),
      lastSuccessAt: iso(s.lastSuccessMs),
      answer: s.lastAnswer,
      answerAt: iso(s.lastAnswerMs),
      error: failing ? s.lastError : null,
      errorClass: failing ? s.lastErrorClass : null,
    },
    lastFixes: store.lastFixes().map((f) => {
      const place = placeAt(f.lat, f.lon);
      return {
        resourceId: f.resourceId,
        latitude: f.lat,
        longitude: f.lon,
        time: new Date(f.timeMs).toISOString(),
        ageS: fixAgeS(nowMs, f.timeMs),
        ...(place ? { eventCity: place.city, eventState: place.state } : {}),
      };
    }),
    clock: { state: clock.state, from: clock.from, offsetMs: clock.offsetMs, held: clock.held, heldExpired: clock.heldExpired },
    sources: daemon.sources.map((src) => ({ name: src.name, type: src.type, healthy: src.healthy, detail: src.detail, lastReadingAt: iso(src.lastReadingMs) })),
    diskFreeBytes: daemon.disk?.freeBytes ?? null,
  };
}

/**
 * What the broker publishes for a device that vanished (the Last Will), and a clean stop
 * publishes itself. The will is written at connect, so it has no time: one would be the
 * connect's, days before the loss on a truck that stayed connected.
 */
export function offlineStatus(deviceId: string, reason: 'stopped' | 'connection lost', nowMs = Date.now()): FleetStatus {
  const base = { online: false, deviceId, version: packageVersion() };
  return reason === 'connection lost' ? { ...base, reason } : { ...base, time: new Date(nowMs).toISOString(), reason };
}
