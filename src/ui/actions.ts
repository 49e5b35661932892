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
import type { MilestoneWarning } from '../milestones/warnings.js';
import { EVENT_NAMES, REASON_NAMES } from './code-names.js';
import { type Lang, translator } from './i18n.js';
import { driverWords } from './refusal.js';
import { milestoneView, type UiHost } from './view.js';

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
  /** The confirm page's own reference (a UUID): the milestone's, so the same form sent twice records once. */
  ref?: string;
}

/** `warnings`: what the rules said of a milestone they let through, for the page to word (warnings.ts). */
export type ActionResult = { ok: true; id: number; what: string; time: string; warnings: MilestoneWarning[] } | { ok: false; message: string; status: 409 | 422; gone?: true };

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** Record what the form asks, or say why not in the driver's words (nothing written then). */
export function perform(host: UiHost, form: ActionForm, log: Logger, lang: Lang = 'en'): ActionResult {
  const config = host.config;
  const t = translator(lang);
  const load: LoadRow | undefined = host.store.getLoad(form.load);
  // A page shown before the load was ended (from the CLI, the fleet).
  if (!load || load.endedMs !== null) return { ok: false, message: t('loadGone', { load: form.load }), status: 409, gone: true };
  const stop = load.stops.find((s) => String(s.sequence) === form.stop);
  // A page shown before the load's stops changed (a fleet update), or an older page's button.
  if (!stop) return { ok: false, message: t('noSuchStop', { load: load.loadNumber, stop: form.stop, stops: load.stops.map((s) => s.sequence).join(', ') }), status: 422 };
  if (!(ACTIONS as readonly string[]).includes(form.action)) return { ok: false, message: t('unknownAction'), status: 422 };
  const action = form.action as Action;
  const code = codeOf(action, stop, config);
  const ref = form.ref && UUID.test(form.ref) ? form.ref : undefined;
  const first = ref === undefined ? undefined : host.store.milestones.byRef(ref);
  if (first) {
    // The same confirm page sent again (a second tap, an answer lost on the cab's Wi-Fi): what the first recorded.
    if (first.loadNumber === load.loadNumber && first.code === code && first.stop === stop.sequence)
      return { ok: true, id: first.id, what: eventName(code, lang), time: milestoneView(first).time, warnings: [] };
    return { ok: false, message: t('badRequest'), status: 422 };
  }
  const time = form.time?.trim() || undefined;
  if (action === 'appointment' && !time) return { ok: false, message: t('appointmentNeedsTime'), status: 422 };
  if (action === 'delay' && !(form.reason && delayReasons(config).includes(form.reason))) return { ok: false, message: t('chooseReason'), status: 422 };
  const input: MilestoneInput = { loadNumber: load.loadNumber, code, stop: stop.sequence, timeText: time, reason: action === 'delay' ? form.reason : undefined, origin: 'manual', ref };
  try {
    const r = recordMilestone(host.store, config, input, host.clockKeeper.gnss.commandNow(), log);
    // Committed: the sender goes now, not at its next poll.
    void host.sender.kick();
    // The warnings' kinds, so support sees what the driver was told (their facts are the driver's).
    const warnings = r.warnings.length ? { warnings: r.warnings.map((w) => w.kind) } : {};
    log.info({ milestone: r.row.id, load: load.loadNumber, code, stop: stop.sequence, ...warnings }, 'milestone recorded on the driver page');
    return { ok: true, id: r.row.id, what: eventName(code, lang), time: milestoneView(r.row).time, warnings: r.warnings };
  } catch (err) {
    if (!(err instanceof MilestoneError)) throw err;
    const words = driverWords(err, t, action === 'appointment');
    if (words) return { ok: false, message: words.text, status: words.already ? 409 : 422 };
    // A rule the driver cannot act on (a load number or code the config now refuses): its
    // message is the CLI's, for support in the log; the driver is told to call dispatch.
    log.warn({ load: load.loadNumber, code, stop: stop.sequence, err: err.message }, 'driver page: milestone refused');
    return { ok: false, message: t('refusedBySettings'), status: 422 };
  }
}
