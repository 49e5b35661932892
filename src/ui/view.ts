/**
 * What the driver sees, read the way `status` reads it (buildStatus, src/cli/status.ts) plus
 * each load's stops and milestones from the buffer, and the sender's state live from the
 * daemon. Plain data: html.ts renders it, the SSE stream (events.ts) sends its live part.
 */
import type { GnssClock } from '../gnss-clock.js';
import type { Store } from '../buffer/store.js';
import type { NewestFixes } from '../admission/newest-fixes.js';
import type { LoadRow, MilestoneRow } from '../buffer/types.js';
import { buildStatus } from '../cli/status.js';
import type { Config } from '../config/schema.js';
import type { SenderStatus } from '../delivery/context.js';
import { placeAt, placeNamed } from '../geo/places.js';
import { stateZones } from '../geo/state-zones.js';
import { zoneAt } from '../geo/timezone.js';
import type { Stop } from '../milestones/stops.js';

/** What the page needs of the running agent. */
export interface UiHost {
  readonly store: Store;
  readonly config: Config;
  readonly sender: { readonly status: SenderStatus; kick(): Promise<void> };
  readonly ingest: { fixes: Pick<NewestFixes, 'get'> };
  /** Now for what the page records: GNSS time while the system clock is not set (gnss-clock.ts). */
  readonly clockKeeper: { readonly gnss: Pick<GnssClock, 'commandNow'> };
}

export type MilestoneState = 'waiting' | 'delivered' | 'refused';

export interface MilestoneView {
  id: number;
  code: string;
  stop: number | null;
  /** When it happened, as sent: `10:32 CST` (the wall clock of its place), or `16:32 UTC`. */
  time: string;
  state: MilestoneState;
  /** The service's answer when it refused it. */
  reason?: string;
}

export interface StopView extends Stop {
  /** The stop's zone: its position's, else its city's, else its state's only one; undefined when none tells. */
  zone?: string;
}

export interface LoadView {
  loadNumber: string;
  resourceId: string;
  next?: StopView;
  fix?: { lat: number; lon: number; timeMs: number; city?: string; state?: string };
  milestones: MilestoneView[];
}

export interface LinkView {
  online: boolean;
  /** First failure seen since the last success. */
  offlineSinceMs?: number;
  waiting: number;
  lastDeliveryMs: number | null;
}

export interface DriverView {
  loads: LoadView[];
  link: LinkView;
}

/** How many milestones of each load the page shows, newest first. */
const RECENT = 5;

export function stopZone(stop: Stop): string | undefined {
  if (stop.latitude !== undefined && stop.longitude !== undefined) return zoneAt(stop.latitude, stop.longitude);
  const p = stop.city && stop.state ? placeNamed(stop.city, stop.state) : undefined;
  if (p) return zoneAt(p.lat, p.lon);
  const zones = stop.state ? stateZones(stop.state) : [];
  return zones.length === 1 ? zones[0] : undefined;
}

export function nextStopOf(load: LoadRow): StopView | undefined {
  const stop = load.nextStop === null ? undefined : load.stops.find((s) => s.sequence === load.nextStop);
  return stop ? { ...stop, zone: stopZone(stop) } : undefined;
}

/**
 * The service's answer as a driver can read it: the problems or message of a JSON body (the
 * sandbox's `{"problems": [...]}`, a `message` or `detail`), else its text.
 */
function readable(answer: string | null): string {
  if (!answer) return '';
  try {
    const j = JSON.parse(answer) as { problems?: unknown; message?: unknown; detail?: unknown; error?: unknown };
    if (Array.isArray(j.problems) && j.problems.length) return j.problems.map(String).join('; ');
    for (const v of [j.message, j.detail, j.error]) if (typeof v === 'string' && v) return v;
  } catch {
    // not JSON: the text as it came
  }
  return answer;
}

/** `10:32 CST` from a body's time object (`16:32 UTC` in the utc form). */
export function wallClock(time: unknown): string {
  const t = (time ?? {}) as { dateTime?: string; timeZoneCode?: string };
  const dt = String(t.dateTime ?? '');
  return `${dt.slice(11, 16)} ${dt.endsWith('Z') ? 'UTC' : (t.timeZoneCode ?? '')}`.trim();
}

export function milestoneView(m: MilestoneRow): MilestoneView {
  return {
    id: m.id,
    code: m.code,
    stop: m.stop,
    time: wallClock(m.body.time),
    state: m.sentMs !== null ? 'delivered' : m.parkedMs !== null ? 'refused' : 'waiting',
    reason: m.parkedMs !== null ? [m.lastStatus === null ? '' : `HTTP ${m.lastStatus}`, readable(m.lastError)].filter(Boolean).join(': ') : undefined,
  };
}

/** Tracks when the link went down, as the page sees the sender: the first failure after the last success. */
export class LinkWatch {
  private sinceMs: number | undefined;

  look(s: SenderStatus, waiting: number): LinkView {
    const failing = s.lastErrorMs !== null && s.lastErrorMs >= (s.lastSuccessMs ?? 0) && s.consecutiveFailures > 0;
    if (!failing) this.sinceMs = undefined;
    else this.sinceMs ??= s.lastErrorMs!;
    return { online: !failing, offlineSinceMs: this.sinceMs, waiting, lastDeliveryMs: s.lastSuccessMs };
  }
}

export function driverView(host: UiHost, link: LinkWatch, nowMs = Date.now()): DriverView {
  const { config, store } = host;
  const status = buildStatus(store, { deviceId: '', configFile: '', buffer: config.buffer.path, lateReadingsS: config.loads.late_readings_s }, nowMs);
  const loads = status.activeLoads.map((a): LoadView => {
    const load = store.getLoad(a.loadNumber)!;
    const stored = status.lastFixes.find((f) => f.resourceId === a.resourceId);
    const live = host.ingest.fixes.get(a.resourceId);
    const f = live && (!stored || live.timeMs > stored.timeMs) ? live : stored;
    const place = f ? placeAt(f.lat, f.lon) : undefined;
    const milestones = store.listMilestones(a.loadNumber).slice(-RECENT).reverse().map(milestoneView);
    return {
      loadNumber: a.loadNumber,
      resourceId: a.resourceId,
      next: nextStopOf(load),
      fix: f ? { lat: f.lat, lon: f.lon, timeMs: f.timeMs, city: place?.city, state: place?.state } : undefined,
      milestones,
    };
  });
  const q = status.queue;
  return { loads, link: link.look(host.sender.status, q.pendingMilestones + q.readings) };
}
