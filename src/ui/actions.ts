/**
 * What a driver does, turned into the CLI's own milestone (src/milestones/record.ts): the same
 * checks, the same place and typed-time rules, the same commit, one per load, code and stop.
 * The page chooses the code from the stop's type and the config's code lists; it never forces.
 */
import type { Logger } from 'pino';
import type { LoadRow } from '../buffer/types.js';
import type { Config } from '../config/schema.js';
import { EVENT_CODES, REASON_CODES } from '../milestones/codes.js';
import { type MilestoneInput, MilestoneError, recordMilestone } from '../milestones/record.js';
import type { Stop } from '../milestones/stops.js';
import { EVENT_NAMES, REASON_NAMES } from './code-names.js';
import type { Lang } from './i18n.js';
import { milestoneView, type UiHost, wallClock } from './view.js';

export const ACTIONS = ['arrive', 'depart', 'delay', 'appointment'] as const;
export type Action = (typeof ACTIONS)[number];

/** The event code an action at `stop` sends, from the config's lists (as the detector's). */
export function codeOf(action: Action, stop: Stop, config: Config): string {
  const c = config.milestones.codes;
  const kind = stop.type === 'pickup' ? 'pickup' : stop.type === 'delivery' ? 'delivery' : 'other';
  if (action === 'arrive') return c[`${kind}_arrive`];
  if (action === 'depart') return c[`${kind}_depart`];
  if (action === 'delay') return config.milestones.delay.code;
  // X12: AA pick-up appointment, AB delivery appointment; a list without them: its first.
  const list = config.codes.appointments;
  const wanted = stop.type === 'pickup' ? 'AA' : 'AB';
  return list.includes(wanted) ? wanted : list[0];
}

/** `arrived at pick-up location (X3)`, `llegada al lugar de recogida (X3)`: never a bare code. */
export function eventName(code: string, lang: Lang = 'en'): string {
  const name = (lang === 'en' ? undefined : EVENT_NAMES[lang][code]) ?? EVENT_CODES[code];
  return name ? `${name} (${code})` : code;
}

export function reasonName(code: string, lang: Lang = 'en'): string {
  const name = (lang === 'en' ? undefined : REASON_NAMES[lang][code]) ?? REASON_CODES[code];
  return name ? `${name} (${code})` : code;
}

/** The reasons a driver may pick for a delay: the config's list, by name; the default (normal status) last. */
export function delayReasons(config: Config): string[] {
  const normal = config.codes.default_reason;
  return [...config.codes.reasons.filter((r) => r !== normal), normal];
}

export interface ActionForm {
  load: string;
  stop: string;
  action: string;
  reason?: string;
  time?: string;
}

export type ActionResult = { ok: true; id: number; what: string; time: string } | { ok: false; message: string; alreadyAt?: string };

/** Record what the form asks, or say why not (nothing written then). */
export function perform(host: UiHost, form: ActionForm, log: Logger): ActionResult {
  const config = host.config;
  const load: LoadRow | undefined = host.store.getLoad(form.load);
  if (!load || load.endedMs !== null) return { ok: false, message: `load ${form.load}: no such active load` };
  const stop = load.stops.find((s) => String(s.sequence) === form.stop);
  if (!stop) return { ok: false, message: `stop ${form.stop}: load ${load.loadNumber} has stops ${load.stops.map((s) => s.sequence).join(', ')}` };
  if (!(ACTIONS as readonly string[]).includes(form.action)) return { ok: false, message: `unknown action ${JSON.stringify(form.action)}` };
  const action = form.action as Action;
  const code = codeOf(action, stop, config);
  const time = form.time?.trim() || undefined;
  if (action === 'appointment' && !time) return { ok: false, message: 'an appointment needs its time' };
  if (action === 'delay' && !(form.reason && delayReasons(config).includes(form.reason))) return { ok: false, message: 'choose the reason of the delay' };
  const input: MilestoneInput = { loadNumber: load.loadNumber, code, stop: stop.sequence, timeText: time, reason: action === 'delay' ? form.reason : undefined, origin: 'manual' };
  try {
    const r = recordMilestone(host.store, config, input, Date.now(), log);
    // Committed: the sender goes now, not at its next poll.
    void host.sender.kick();
    log.info({ milestone: r.row.id, load: load.loadNumber, code, stop: stop.sequence }, 'milestone recorded on the driver page');
    return { ok: true, id: r.row.id, what: eventName(code), time: milestoneView(r.row).time };
  } catch (err) {
    if (!(err instanceof MilestoneError)) throw err;
    const existing = host.store.listMilestones(load.loadNumber).find((m) => m.code === code && m.stop === stop.sequence);
    // The typed time's rules speak of the CLI's option; here the field is the time typed.
    const message = err.message.replace(/--time\b:?\s*/g, '');
    return existing && /already has/.test(err.message) ? { ok: false, message, alreadyAt: wallClock(existing.body.time) } : { ok: false, message };
  }
}
