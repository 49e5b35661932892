/**
 * The page's HTML, rendered on the server from the driver's view (view.ts): plain forms that
 * work with JavaScript off, every control labelled, no inline script or style (the CSP
 * forbids both), nothing secret in it but the session's CSRF token.
 */
import type { Config } from '../config/schema.js';
import { systemZone, zoneAt, formatTime } from '../geo/timezone.js';
import { appointmentMs } from '../milestones/appointments.js';
import { type Action, codeOf, delayReasons, eventName, reasonName } from './actions.js';
import type { Lang, translator } from './i18n.js';
import type { DriverView, LinkView, LoadView, MilestoneView, StopView } from './view.js';

type T = ReturnType<typeof translator>;

/** How a request sees the page: its language, and the high-contrast theme when its switch is on. */
export interface Look {
  lang: Lang;
  sun: boolean;
}

const ESC: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
export const esc = (v: unknown): string => String(v ?? '').replace(/[&<>"']/g, (c) => ESC[c]);

/** `10:32` in `zone`. */
export function hhmm(ms: number, zone: string): string {
  return formatTime(new Date(ms), zone, 'local').dateTime.slice(11, 16);
}

function zoneCode(ms: number, zone: string): string {
  return formatTime(new Date(ms), zone, 'local').timeZoneCode;
}

export function ago(t: T, ms: number, nowMs: number): string {
  const min = Math.max(0, Math.round((nowMs - ms) / 60_000));
  if (min < 1) return t('justNow');
  if (min < 120) return t('ago', { n: min });
  return t('hoursAgo', { n: Math.round(min / 60) });
}

export function layout(t: T, look: Look, body: string, opts: { live?: boolean; loggedIn?: boolean; csrf?: string } = {}): string {
  const logout = opts.loggedIn && opts.csrf ? `<form method="post" action="/logout"><input type="hidden" name="_csrf" value="${esc(opts.csrf)}"><button type="submit">${esc(t('logOut'))}</button></form>` : '';
  return `<!doctype html>
<html lang="${look.lang}"${look.sun ? ' class="sun"' : ''}>
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1">
<title>${esc(t('title'))}</title>
<link rel="stylesheet" href="/page.css">
${opts.live ? '<script src="/live.js" defer></script>\n' : ''}</head>
<body>
<header><h1>${esc(t('title'))}</h1>${logout}</header>
${body}
<footer><a class="button secondary" href="/theme">${esc(look.sun ? t('themeNormal') : t('themeSun'))}</a></footer>
</body>
</html>
`;
}

export function loginPage(t: T, look: Look, csrf: string, error?: string): string {
  return layout(
    t,
    look,
    `<main>
${error ? `<p class="error" role="alert">${esc(error)}</p>` : ''}<form method="post" action="/login">
<input type="hidden" name="_csrf" value="${esc(csrf)}">
<label for="pin">${esc(t('pin'))}</label>
<input id="pin" name="pin" type="password" inputmode="numeric" autocomplete="current-password" pattern="[0-9]{4,8}" maxlength="8" required autofocus>
<div class="row"><button type="submit">${esc(t('logIn'))}</button></div>
</form>
</main>`,
  );
}

/** The zone the link line's times are told in: the newest fix's, else this device's. */
export function viewZone(view: DriverView): string {
  const f = view.loads
    .map((l) => l.fix)
    .filter((x) => x !== undefined)
    .sort((a, b) => b.timeMs - a.timeMs)[0];
  return f ? zoneAt(f.lat, f.lon) : systemZone();
}

export function linkText(t: T, link: LinkView, zone: string): string {
  const head = link.online ? t('online') : t('offline', { time: hhmm(link.offlineSinceMs ?? Date.now(), zone) });
  const last = link.lastDeliveryMs === null ? t('never') : hhmm(link.lastDeliveryMs, zone);
  return `${head} · ${t('waiting', { n: link.waiting })} · ${t('lastDelivery', { time: last })}`;
}

export function stateText(t: T, m: MilestoneView): string {
  if (m.state === 'delivered') return t('stateDelivered');
  if (m.state === 'refused') return t('stateRefused', { reason: (m.reason ?? '').slice(0, 200) });
  return t('stateWaiting');
}

function stopLine(t: T, stop: StopView): string {
  const kind = stop.type === 'pickup' ? t('pickup') : stop.type === 'delivery' ? t('delivery') : t('other');
  const where = [stop.name, [stop.city, stop.state].filter(Boolean).join(', ')].filter(Boolean).join(', ');
  // Instants (a load an older version started may hold a local time: read in the stop's zone).
  const startMs = appointmentMs(stop, 'start', stop.zone);
  const endMs = appointmentMs(stop, 'end', stop.zone);
  let window = '';
  if (!Number.isNaN(startMs) || !Number.isNaN(endMs)) {
    const zone = stop.zone ?? 'UTC';
    const from = Number.isNaN(startMs) ? '' : hhmm(startMs, zone);
    const to = Number.isNaN(endMs) ? '' : hhmm(endMs, zone);
    window = `<p>${esc(t('appointment'))}: ${esc([from, to].filter(Boolean).join('–'))} ${esc(zoneCode(Number.isNaN(startMs) ? endMs : startMs, zone))}</p>`;
  }
  return `<h3>${esc(t('nextStop'))}: ${esc(t('stop', { n: stop.sequence }))} · ${esc(kind)}</h3>
${where ? `<p>${esc(where)}</p>` : ''}${window}`;
}

function actionButtons(t: T, lang: Lang, load: LoadView, stop: StopView, config: Config): string {
  const label: Record<Action, string> = { arrive: t('arrived'), depart: t('departed'), delay: t('delay'), appointment: t('setAppointment') };
  const buttons = (Object.keys(label) as Action[])
    .map(
      (a) =>
        `<button type="submit" name="action" value="${a}"${a === 'arrive' || a === 'depart' ? '' : ' class="secondary"'}>${esc(label[a])}<small>${esc(eventName(codeOf(a, stop, config), lang))}</small></button>`,
    )
    .join('\n');
  return `<form method="get" action="/confirm" class="actions">
<input type="hidden" name="load" value="${esc(load.loadNumber)}">
<input type="hidden" name="stop" value="${stop.sequence}">
${buttons}
</form>`;
}

function milestoneList(t: T, lang: Lang, load: LoadView): string {
  if (load.milestones.length === 0) return `<p class="muted">${esc(t('none'))}</p>`;
  const items = load.milestones.map(
    (m) =>
      `<li data-m="${m.id}"><span>${esc(eventName(m.code, lang))}${m.stop === null ? '' : `, ${esc(t('stop', { n: m.stop }))}`}, ${esc(m.time)}</span><span class="state ${m.state}">${esc(stateText(t, m))}</span></li>`,
  );
  return `<ul class="ms">\n${items.join('\n')}\n</ul>`;
}

/** `flash.warnings`: what the rules said of the milestone just saved, worded (warnings.ts), shown under its `Saved`. */
export function mainPage(t: T, look: Look, view: DriverView, config: Config, csrf: string, flash?: { ok?: string; error?: string; warnings?: string[] }, nowMs = Date.now()): string {
  const loads = view.loads.map((l) => {
    const fix = l.fix
      ? l.fix.city
        ? t('near', { place: `${l.fix.city}, ${l.fix.state}`, ago: ago(t, l.fix.timeMs, nowMs) })
        : t('at', { lat: l.fix.lat.toFixed(4), lon: l.fix.lon.toFixed(4), ago: ago(t, l.fix.timeMs, nowMs) })
      : t('noFix');
    return `<section class="load" aria-label="${esc(t('load'))} ${esc(l.loadNumber)}">
<h2>${esc(t('load'))} ${esc(l.loadNumber)}</h2>
<p>${esc(t('truck'))} ${esc(l.resourceId)}: ${esc(fix)}</p>
${l.next ? `${stopLine(t, l.next)}\n${actionButtons(t, look.lang, l, l.next, config)}` : `<p>${esc(t('noStop'))}</p>`}
<h3>${esc(t('recent'))}</h3>
${milestoneList(t, look.lang, l)}
</section>`;
  });
  const warned = (flash?.warnings ?? []).map((w) => `<p class="warn" role="alert">${esc(w)}</p>\n`).join('');
  const banner = flash?.ok ? `<p class="flash" role="status">${esc(flash.ok)}</p>\n${warned}` : flash?.error ? `<p class="error" role="alert">${esc(flash.error)}</p>` : '';
  return layout(
    t,
    look,
    `<main>
<p id="link" class="link ${view.link.online ? 'online' : 'offline'}" role="status" aria-live="polite">${esc(linkText(t, view.link, viewZone(view)))}</p>
${banner}</main>
<main class="loads">
${loads.length ? loads.join('\n') : `<p>${esc(t('noLoads'))}</p>`}
</main>`,
    { live: true, loggedIn: true, csrf },
  );
}

export interface ConfirmArgs {
  load: string;
  stop: StopView;
  action: Action;
  csrf: string;
  error?: string;
  /** What was typed, shown again after a refusal. */
  reason?: string;
  time?: string;
  /** The form's reference (a UUID): the milestone's, so a second tap records nothing more. */
  ref?: string;
}

/**
 * The time field's label, naming the zone a time typed is read in: the stop's, which need not
 * be the zone of the driver's phone (a delay reported in Chicago for a stop in Indianapolis).
 */
function timeLabel(t: T, appointment: boolean, zone: string | undefined): string {
  if (!zone) return appointment ? t('appointmentAt') : t('happenedAt');
  const code = zoneCode(Date.now(), zone);
  return appointment ? t('appointmentAtZone', { zone: code }) : t('happenedAtZone', { zone: code });
}

export function confirmPage(t: T, look: Look, config: Config, a: ConfirmArgs): string {
  const code = codeOf(a.action, a.stop, config);
  const reasons =
    a.action === 'delay'
      ? `<label for="reason">${esc(t('reason'))}</label>
<select id="reason" name="reason" required>
<option value=""></option>
${delayReasons(config)
  .map((r) => `<option value="${esc(r)}"${r === a.reason ? ' selected' : ''}>${esc(reasonName(r, look.lang))}</option>`)
  .join('\n')}
</select>`
      : '';
  const appointment = a.action === 'appointment';
  return layout(
    t,
    look,
    `<main>
<h2>${esc(eventName(code, look.lang))}</h2>
<p>${esc(t('load'))} ${esc(a.load)}, ${esc(t('stop', { n: a.stop.sequence }))}${a.stop.name ? `: ${esc(a.stop.name)}` : ''}</p>
${a.error ? `<p class="error" role="alert">${esc(a.error)}</p>` : ''}<form method="post" action="/milestone" class="confirm">
<input type="hidden" name="_csrf" value="${esc(a.csrf)}">
<input type="hidden" name="load" value="${esc(a.load)}">
<input type="hidden" name="stop" value="${a.stop.sequence}">
<input type="hidden" name="action" value="${a.action}">
${a.ref ? `<input type="hidden" name="_form" value="${esc(a.ref)}">\n` : ''}${reasons}
<label for="time">${esc(timeLabel(t, appointment, a.stop.zone))}</label>
<input id="time" name="time" type="datetime-local"${appointment ? ' required' : ''} value="${esc(a.time ?? '')}">
<div class="row"><a class="button secondary" href="/">${esc(t('cancel'))}</a><button type="submit">${esc(t('confirm'))}</button></div>
</form>
</main>`,
    { loggedIn: true, csrf: a.csrf },
  );
}
