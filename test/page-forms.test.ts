/**
 * The driver's page fed what a cab gives it: a Confirm tapped twice (a slow answer, a glove),
 * times the rules refuse, a form sent after the session ended or the load was ended from the
 * CLI. A real agent on a real buffer file, over HTTP; the service is unreachable (the
 * milestones wait), which changes nothing of what is recorded.
 */
import { Writable } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Agent } from '../src/agent.js';
import { formatTime, systemZone, zoneOffsetMinutes } from '../src/geo/timezone.js';
import { createLogger } from '../src/log.js';
import { pageAgentConfig, TEST_KEY, tempDir, writeFile } from './helpers.js';

const PIN = '2468';
const DAY_MS = 86_400_000;
/** Stop 1 in Chicago (its coordinates give its zone), stop 2 in Indianapolis. */
const STOPS = [
  { sequence: 1, type: 'pickup' as const, name: 'Chicago cold store', latitude: 41.847, longitude: -87.647, city: 'Chicago', state: 'IL' },
  { sequence: 2, type: 'delivery' as const, name: 'Indianapolis DC', latitude: 39.768, longitude: -86.158, city: 'Indianapolis', state: 'IN' },
];

let tmp: ReturnType<typeof tempDir>;
let agent: Agent;
let base: string;
/** The agent's log lines (support reads them): JSON, one a line. */
let logLines: string[];

beforeEach(async () => {
  tmp = tempDir('ta-page-forms-');
  const config = pageAgentConfig(tmp.dir, 'forms-test', { pin_file: writeFile(tmp.dir, 'pin', `${PIN}\n`, 0o600) });
  logLines = [];
  const lines = new Writable({
    write(chunk, _encoding, done) {
      logLines.push(String(chunk));
      done();
    },
  });
  const log = createLogger({ level: 'info', destination: lines });
  agent = new Agent({ file: '(test)', config, deviceId: 'forms-test', warnings: [] }, { key: TEST_KEY, origin: 'test' }, log);
  await agent.start();
  agent.store.startLoad({ loadNumber: 'L-1001', resourceId: 'T1', resourceType: 'Truck', stops: STOPS, nowMs: Date.now() - DAY_MS });
  base = `http://127.0.0.1:${agent.effectiveSettings()['ui.port']}`;
});

afterEach(async () => {
  await agent.stop();
  tmp.cleanup();
});

/** A browser's cookie jar, in one object. */
class Browser {
  readonly jar = new Map<string, string>();
  constructor(readonly lang = 'en-US') {}

  async request(path: string, init: { method?: string; body?: string } = {}): Promise<{ status: number; location: string | null; type: string; text: string }> {
    const headers: Record<string, string> = { cookie: [...this.jar].map(([k, v]) => `${k}=${v}`).join('; '), 'accept-language': this.lang };
    if (init.body !== undefined) headers['content-type'] = 'application/x-www-form-urlencoded';
    const r = await fetch(base + path, { method: init.method ?? 'GET', headers, body: init.body, redirect: 'manual' });
    for (const c of r.headers.getSetCookie()) {
      const [kv] = c.split(';');
      const i = kv.indexOf('=');
      if (kv.slice(i + 1)) this.jar.set(kv.slice(0, i), kv.slice(i + 1));
      else this.jar.delete(kv.slice(0, i));
    }
    return { status: r.status, location: r.headers.get('location'), type: r.headers.get('content-type') ?? '', text: await r.text() };
  }

  async logIn(): Promise<void> {
    const form = await this.request('/');
    const r = await this.request('/login', { method: 'POST', body: `_csrf=${hidden(form.text, '_csrf')}&pin=${PIN}` });
    expect(r.status).toBe(303);
  }

  /** The confirm page's form as the browser would send it, with `fields` filled in. */
  async confirmForm(query: string, fields: Record<string, string> = {}): Promise<string> {
    const page = await this.request(`/confirm?${query}`);
    expect(page.status, page.text).toBe(200);
    const form = page.text.slice(page.text.indexOf('action="/milestone"'));
    const body = new URLSearchParams();
    for (const m of form.matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)">/g)) body.set(m[1], m[2].replace(/&amp;/g, '&'));
    for (const [k, v] of Object.entries(fields)) body.set(k, v);
    return body.toString();
  }
}

const hidden = (html: string, name: string) => new RegExp(`name="${name}" value="([^"]+)"`).exec(html)?.[1] ?? '';
const errorOf = (html: string) =>
  /<p class="error" role="alert">([^<]*)<\/p>/
    .exec(html)?.[1]
    ?.replace(/&#39;/g, "'")
    .replace(/&quot;/g, '"');
const warningsOf = (html: string) => [...html.matchAll(/<p class="warn" role="alert">([^<]*)<\/p>/g)].map((m) => m[1].replace(/&#39;/g, "'").replace(/&quot;/g, '"'));
const codes = () => agent.store.listMilestones('L-1001').map((m) => `${m.code}/${m.stop}`);
/** `2026-10-12T09:41` in Chicago: what a datetime-local field sends. */
const chicago = (ms: number) => formatTime(new Date(ms), 'America/Chicago', 'local').dateTime.slice(0, 16);

describe('a Confirm tapped twice', () => {
  it('records one delay, and both taps land on the same "Saved"', async () => {
    const b = new Browser();
    await b.logIn();
    const form = await b.confirmForm('load=L-1001&stop=1&action=delay', { reason: 'AI' });
    // The second tap while the first is on its way, then the browser sending it again (a lost answer).
    const [one, two] = await Promise.all([b.request('/milestone', { method: 'POST', body: form }), b.request('/milestone', { method: 'POST', body: form })]);
    const three = await b.request('/milestone', { method: 'POST', body: form });
    expect(codes()).toEqual(['SD/1']);
    const saved = `/?saved=${agent.store.listMilestones('L-1001')[0].id}`;
    expect([one, two, three].map((r) => [r.status, r.location])).toEqual([
      [303, saved],
      [303, saved],
      [303, saved],
    ]);
    // A new confirm page is a new delay: recorded.
    await b.request('/milestone', { method: 'POST', body: await b.confirmForm('load=L-1001&stop=1&action=delay', { reason: 'AO' }) });
    expect(codes()).toEqual(['SD/1', 'SD/1']);
  });

  it('a departure tapped twice says "Saved", not "already recorded"', async () => {
    const b = new Browser();
    await b.logIn();
    const form = await b.confirmForm('load=L-1001&stop=1&action=depart');
    const [one, two] = await Promise.all([b.request('/milestone', { method: 'POST', body: form }), b.request('/milestone', { method: 'POST', body: form })]);
    expect(codes()).toEqual(['AF/1']);
    expect([one.status, two.status]).toEqual([303, 303]);
    expect(two.location).toBe(one.location);
  });

  it("on a device whose clock is not set, an arrival of now is stamped on GNSS time, not half a day early on the system clock's", async () => {
    // What a device booted 12 h behind sees: the kernel says not synchronised, and a fix's
    // time is 12 h after the system clock's (two fixes that agree: src/gnss-first-fix.ts).
    const gnss = agent.clockKeeper.gnss;
    gnss.setSync({ synchronised: false, from: 'test: not synchronised' });
    gnss.noteFix(Date.now() + 12 * 3_600_000);
    gnss.noteFix(Date.now() + 12 * 3_600_000);
    expect(gnss.state()).toBe('gnss');
    const b = new Browser();
    await b.logIn();
    expect((await b.request('/milestone', { method: 'POST', body: await b.confirmForm('load=L-1001&stop=1&action=arrive') })).status).toBe(303);
    const [m] = agent.store.listMilestones('L-1001');
    expect(m.code).toBe('X3');
    expect(Math.abs(Date.parse((m.body.time as { dateTime: string }).dateTime) - (Date.now() + 12 * 3_600_000))).toBeLessThan(60_000);
  });

  it("finds a tap's earlier milestone by its reference through an index, not a scan of the table", () => {
    // The query of Milestones.byRef, on this agent's buffer file: ref's UNIQUE index serves it.
    const plan = agent.store.db.prepare('EXPLAIN QUERY PLAN SELECT * FROM milestones WHERE ref = ?').all('x') as { detail: string }[];
    expect(plan.map((p) => p.detail)).toEqual([expect.stringMatching(/^SEARCH milestones USING INDEX \w+ \(ref=\?\)$/)]);
  });
});

describe('a refusal in words a driver can act on (the page cannot force, and has no --time)', () => {
  const cli = /--force|--time|--lat|--city|sources_time|max_past_days|max_future_s|codes\.appointments|UTC offset|milestone \d/;

  it.each([
    ['45 days ago', 'arrive', () => chicago(Date.now() - 45 * DAY_MS), /^That time is 45 days ago: the page takes times up to 30 days back\. Check the date; an older correction goes through dispatch\.$/],
    ['a year typo (2016)', 'arrive', () => '2016-11-26T08:00', /^Check the year: that date is before any load\.$/],
    ['tomorrow', 'arrive', () => chicago(Date.now() + DAY_MS), /^That time is still to come: give the time it happened, or leave it empty for now\.$/],
    ['an appointment two years ahead', 'appointment', () => chicago(Date.now() + 800 * DAY_MS), /^Check the year: an appointment is not more than a year ahead\.$/],
    ['not a time', 'arrive', () => 'yesterday 10am', /^The time was not understood: give the date and the time, such as 2026-11-23T10:00\.$/],
  ])('%s: refused, nothing written, no word of the CLI', async (_what, action, time, words) => {
    const b = new Browser();
    await b.logIn();
    const r = await b.request('/milestone', { method: 'POST', body: await b.confirmForm(`load=L-1001&stop=1&action=${action}`, { time: time() }) });
    expect(r.status).toBe(422);
    expect(errorOf(r.text)).toMatch(words);
    expect(errorOf(r.text)).not.toMatch(cli);
    // What was typed is on the form again, to correct.
    expect(r.text).toContain(`value="${time()}"`);
    expect(codes()).toEqual([]);
  });

  it('a second arrival: when the first was recorded, and nothing of --force', async () => {
    const b = new Browser();
    await b.logIn();
    expect((await b.request('/milestone', { method: 'POST', body: await b.confirmForm('load=L-1001&stop=1&action=arrive') })).status).toBe(303);
    const r = await b.request('/milestone', { method: 'POST', body: await b.confirmForm('load=L-1001&stop=1&action=arrive') });
    expect(r.status).toBe(409);
    expect(errorOf(r.text)).toMatch(/^Already recorded at \d\d:\d\d CST: one per stop\. Nothing new was saved\.$/);
    expect(codes()).toEqual(['X3/1']);
  });

  it('a stop with no place and a truck with no position: leave the time empty, not "give the offset"', async () => {
    agent.store.startLoad({ loadNumber: 'L-2002', resourceId: 'T2', resourceType: 'Truck', stops: [{ sequence: 1, type: 'delivery', name: 'Somewhere' }], nowMs: Date.now() - DAY_MS });
    const b = new Browser();
    await b.logIn();
    const r = await b.request('/milestone', { method: 'POST', body: await b.confirmForm('load=L-2002&stop=1&action=arrive', { time: chicago(Date.now() - 3_600_000) }) });
    expect(r.status).toBe(422);
    expect(errorOf(r.text)).toBe("Nothing tells this stop's time zone yet (the stop has no place, the truck no position): leave the time empty to record it as of now.");
    // Empty: recorded as of now.
    expect((await b.request('/milestone', { method: 'POST', body: await b.confirmForm('load=L-2002&stop=1&action=arrive') })).status).toBe(303);
  });

  it('in Spanish on a Spanish phone', async () => {
    const b = new Browser('es-MX,es;q=0.9');
    await b.logIn();
    const r = await b.request('/milestone', { method: 'POST', body: await b.confirmForm('load=L-1001&stop=1&action=arrive', { time: chicago(Date.now() - 45 * DAY_MS) }) });
    expect(errorOf(r.text)).toBe('Esa hora es de hace 45 días: la página acepta horas de hasta 30 días atrás. Revise la fecha; una corrección más antigua pasa por el despacho.');
  });
});

describe("a milestone recorded with a warning: the page says it, in the driver's words and language", () => {
  const cli = /--|stopsequenceNumber|eventCity|max_fix_age_s|zone of this device|the last fix of/;

  it('recorded without a position: said after Saved, in English and in Spanish, only to the session that recorded it, and logged by kind', async () => {
    agent.store.startLoad({ loadNumber: 'L-2002', resourceId: 'T2', resourceType: 'Truck', stops: [{ sequence: 1, type: 'delivery', name: 'Somewhere' }], nowMs: Date.now() - DAY_MS });
    const en = new Browser();
    await en.logIn();
    const r = await en.request('/milestone', { method: 'POST', body: await en.confirmForm('load=L-2002&stop=1&action=arrive') });
    expect(r.status).toBe(303);
    const page = await en.request(r.location!);
    expect(page.text).toMatch(/<p class="flash" role="status">Saved: [^<]*<\/p>/);
    expect(warningsOf(page.text)).toEqual([
      `Recorded without a position (neither the stop nor the truck has one for that time): its time is sent in ${systemZone()} time. The agent adds the truck's position when it sends it, if it has one by then.`,
    ]);
    // Another phone's page of the same milestone: its Saved, not this driver's warnings.
    const other = new Browser();
    await other.logIn();
    expect(warningsOf((await other.request(r.location!)).text)).toEqual([]);
    const es = new Browser('es-MX,es;q=0.9');
    await es.logIn();
    const d = await es.request('/milestone', { method: 'POST', body: await es.confirmForm('load=L-2002&stop=1&action=depart') });
    expect(d.status).toBe(303);
    const [w] = warningsOf((await es.request(d.location!)).text);
    expect(w).toBe(
      `Registrado sin posición (ni la parada ni el camión tienen una para esa hora): su hora se envía en la hora de ${systemZone()}. El agente añade la posición del camión al enviarlo, si para entonces tiene una.`,
    );
    expect(w).not.toMatch(cli);
    const recorded = logLines.map((l) => JSON.parse(l)).filter((l) => l.msg === 'milestone recorded on the driver page');
    expect(recorded.map((l) => [l.code, l.warnings])).toEqual([
      ['X1', ['no-position']],
      ['D1', ['no-position']],
    ]);
  });

  it('an appointment typed for the night the clocks go back: read as the first of the two, said in English and in French', async () => {
    // The next night Chicago's clocks go back (always within the year an appointment may be ahead).
    const HOUR = 3_600_000;
    let ms = Math.ceil(Date.now() / HOUR) * HOUR;
    while (!(zoneOffsetMinutes('America/Chicago', ms) === -300 && zoneOffsetMinutes('America/Chicago', ms + HOUR) === -360)) ms += HOUR;
    const text = chicago(ms + HOUR / 2);
    expect(text).toMatch(/T01:30$/);
    const [first, second] = [ms + HOUR / 2, ms + (3 * HOUR) / 2].map((x) => formatTime(new Date(x), 'America/Chicago', 'local').dateTime.replace('.000', ''));
    const en = new Browser();
    await en.logIn();
    const r = await en.request('/milestone', { method: 'POST', body: await en.confirmForm('load=L-1001&stop=1&action=appointment', { time: text }) });
    expect(r.status).toBe(303);
    expect(warningsOf((await en.request(r.location!)).text)).toEqual([
      `${text} happens twice in America/Chicago (the clocks go back an hour that night): it was recorded as the first, ${first}. If you meant the second (${second}), tell dispatch.`,
    ]);
    const fr = new Browser('fr-CA,fr;q=0.9');
    await fr.logIn();
    const f = await fr.request('/milestone', { method: 'POST', body: await fr.confirmForm('load=L-1001&stop=1&action=appointment', { time: text }) });
    expect(warningsOf((await fr.request(f.location!)).text)).toEqual([
      `${text} existe deux fois dans le fuseau America/Chicago (les horloges reculent d’une heure cette nuit-là) : enregistré comme la première, ${first}. Si vous vouliez dire la seconde (${second}), prévenez l’exploitation.`,
    ]);
    expect(codes()).toEqual(['AA/1', 'AA/1']);
  });

  it('a time typed for a stop with no place, on a truck since gone to another zone: read in the zone of its last fix, sent in the zone it was in then, and said', async () => {
    // T3 in Querétaro (America/Mexico_City) three hours ago, in Hermosillo (America/Hermosillo) now.
    const HOUR = 3_600_000;
    const now = Date.now();
    agent.store.startLoad({ loadNumber: 'L-3003', resourceId: 'T3', resourceType: 'Truck', stops: [{ sequence: 1, type: 'delivery', name: 'Somewhere' }], nowMs: now - 4 * HOUR });
    const then = Array.from({ length: 30 }, (_, i) => ({ resourceId: 'T3', timeMs: now - 3 * HOUR + i * 10_000, lat: 20.5888, lon: -100.3899 }));
    agent.store.insertReadings([...then, { resourceId: 'T3', timeMs: now - 30_000, lat: 29.0729, lon: -110.9559 }]);
    const typed = formatTime(new Date(now - 3 * HOUR + 120_000), 'America/Hermosillo', 'local').dateTime.slice(0, 16);
    const b = new Browser('es-MX');
    await b.logIn();
    const r = await b.request('/milestone', { method: 'POST', body: await b.confirmForm('load=L-3003&stop=1&action=arrive', { time: typed }) });
    expect(r.status).toBe(303);
    expect(warningsOf((await b.request(r.location!)).text)).toEqual([
      `${typed} se leyó en la zona horaria de la última posición del camión (America/Hermosillo); a esa hora el camión estaba en America/Mexico_City, así que el mismo instante se envía en la hora de America/Mexico_City.`,
    ]);
  });

  it("a time typed with an offset not the stop's (a browser that shows the field as plain text): sent as that instant, and said", async () => {
    const pacific = `${formatTime(new Date(Date.now() - 3_600_000), 'Etc/GMT+8', 'local').dateTime.slice(0, 16)}-08:00`;
    const b = new Browser();
    await b.logIn();
    const r = await b.request('/milestone', { method: 'POST', body: await b.confirmForm('load=L-1001&stop=1&action=arrive', { time: pacific }) });
    expect(r.status).toBe(303);
    const [w] = warningsOf((await b.request(r.location!)).text);
    expect(w).toMatch(
      /^\S+-08:00 has the offset -08:00, but the place's time zone \(America\/Chicago\) is at -0[56]:00 then: it was recorded as the same moment there, \S+-0[56]:00\. If you meant \d\d:\d\d there, tell dispatch\.$/,
    );
    expect(w).not.toMatch(cli);
  });
});

describe("what is missing from a form, in the driver's language", () => {
  it('an appointment without its time (Spanish), a delay without its reason and a stop the load has not (French): nothing written', async () => {
    const es = new Browser('es-ES');
    await es.logIn();
    const a = await es.request('/milestone', { method: 'POST', body: await es.confirmForm('load=L-1001&stop=1&action=appointment', { time: '' }) });
    expect([a.status, errorOf(a.text)]).toEqual([422, 'Una cita necesita su hora: indique la fecha y la hora.']);
    const fr = new Browser('fr-FR');
    await fr.logIn();
    const d = await fr.request('/milestone', { method: 'POST', body: await fr.confirmForm('load=L-1001&stop=1&action=delay') });
    expect([d.status, errorOf(d.text)]).toEqual([422, 'Choisissez le motif du retard.']);
    const stale = new URLSearchParams(await fr.confirmForm('load=L-1001&stop=1&action=arrive'));
    stale.set('stop', '9');
    const s = await fr.request('/milestone', { method: 'POST', body: stale.toString() });
    expect([s.status, s.text.trim()]).toEqual([422, 'Le chargement L-1001 n’a pas d’arrêt 9 (ses arrêts : 1, 2) : rechargez la page.']);
    expect(codes()).toEqual([]);
  });

  it("a load number the config no longer takes: the driver is told to call dispatch, not the CLI's rule", async () => {
    // Started before api.load_number_pattern was tightened (the store takes it as it is).
    agent.store.startLoad({ loadNumber: 'L 9009', resourceId: 'T9', resourceType: 'Truck', stops: STOPS, nowMs: Date.now() - DAY_MS });
    const es = new Browser('es-ES');
    await es.logIn();
    const r = await es.request('/milestone', { method: 'POST', body: await es.confirmForm('load=L%209009&stop=1&action=arrive') });
    expect([r.status, errorOf(r.text)]).toEqual([422, 'La configuración de este agente rechaza este hito: no se guardó nada. Avise al despacho.']);
    expect(agent.store.listMilestones('L 9009')).toEqual([]);
  });
});

describe("the time field names the zone it is read in (the stop's, maybe not the driver's phone's)", () => {
  it('Chicago for stop 1, Indianapolis for stop 2, whichever is next', async () => {
    const b = new Browser();
    await b.logIn();
    const label = async (q: string) => /<label for="time">([^<]*)<\/label>/.exec((await b.request(`/confirm?${q}`)).text)?.[1];
    expect(await label('load=L-1001&stop=1&action=arrive')).toBe('It happened at (local time of the stop, CST; empty: now)');
    expect(await label('load=L-1001&stop=2&action=delay')).toBe('It happened at (local time of the stop, EST; empty: now)');
    expect(await label('load=L-1001&stop=2&action=appointment')).toBe('Appointment time (local time of the stop, EST)');
  });
});

describe('the live stream', () => {
  it('ends when its session does (log out on the tablet): the tab left open gets no more', async () => {
    const b = new Browser();
    await b.logIn();
    const cookie = [...b.jar].map(([k, v]) => `${k}=${v}`).join('; ');
    const stream = await fetch(`${base}/events`, { headers: { cookie } });
    expect(stream.status).toBe(200);
    const reader = stream.body!.getReader();
    await reader.read();
    const page = await b.request('/');
    expect((await b.request('/logout', { method: 'POST', body: `_csrf=${hidden(page.text, '_csrf')}` })).status).toBe(303);
    // Read until the agent ends it; a stream still open after 5 s fails the test.
    const ended = (async () => {
      for (;;) if ((await reader.read()).done) return true;
    })();
    expect(await Promise.race([ended, new Promise((r) => setTimeout(() => r(false), 5000))])).toBe(true);
    await reader.cancel();
  });
});

describe('a form sent when it can no longer be', () => {
  it('after the session ended (an agent restart, a shift later): the login page says to log in and record it again', async () => {
    const b = new Browser();
    await b.logIn();
    const form = await b.confirmForm('load=L-1001&stop=1&action=arrive');
    b.jar.set('ta_session', 'ended-session-xxxxxxxxxxxxxxxxxxxx');
    const r = await b.request('/milestone', { method: 'POST', body: form });
    expect(r.status).toBe(401);
    expect(r.type).toMatch(/^text\/html/);
    expect(errorOf(r.text)).toBe('Your session ended, and this was not saved: log in, then record it again.');
    expect(r.text).toContain('action="/login"');
    expect(codes()).toEqual([]);
    // The form on it works.
    expect((await b.request('/login', { method: 'POST', body: `_csrf=${hidden(r.text, '_csrf')}&pin=${PIN}` })).status).toBe(303);
  });

  it('for a load ended from the CLI meanwhile: the page says so, in a page', async () => {
    const b = new Browser();
    await b.logIn();
    const form = await b.confirmForm('load=L-1001&stop=1&action=arrive');
    agent.store.endLoad('L-1001', Date.now());
    const r = await b.request('/milestone', { method: 'POST', body: form });
    expect(r.status).toBe(409);
    expect(r.type).toMatch(/^text\/html/);
    expect(errorOf(r.text)).toBe('Load L-1001 is no longer active: nothing was saved.');
    expect(codes()).toEqual([]);
  });
});
