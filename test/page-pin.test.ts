/**
 * The PIN against a guesser with many addresses (the ~250 of the cab's /24): past a small
 * allowance of wrong PINs from all addresses, each address that sent one waits before its
 * next is checked, so trying every 4-digit PIN takes days; the driver's phone, with no wrong
 * PIN of its own, is checked at once, and a typo or four cost at most minutes. The model runs
 * on a clock of its own; the page over HTTP in a real agent on a real buffer file, with
 * loopback addresses (127.0.0.2, ...) as the guesser's.
 */
import { get as httpGet, request as httpRequest } from 'node:http';
import { describe, expect, it } from 'vitest';
import { Agent } from '../src/agent.js';
import { Auth, LOCK_MS } from '../src/ui/auth.js';
import { waitWords } from '../src/ui/i18n.js';
import { PinSlowing, SLOW_ALLOWANCE, SLOW_WAITS_MS } from '../src/ui/pin-slowing.js';
import { lineLogger, pageAgentConfig, TEST_KEY, tempDir, writeFile } from './helpers.js';

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const PIN = '2468';

/** An Auth and its slowing on one clock the test moves. */
function model(start = 1_000_000) {
  const clock = { now: start };
  const now = () => clock.now;
  const auth = new Auth(PIN, now, new PinSlowing(now));
  return { clock, auth };
}

/**
 * A guesser on `addresses` addresses, each sending its next guess the moment it may (the
 * answer's wait, which ends early if the slowing lapses): when each PIN was checked.
 */
function attack(m: ReturnType<typeof model>, addresses: number, until: number, stopAt = 10_000): { at: number[] } {
  const keys = Array.from({ length: addresses }, (_, i) => `10.0.${i >> 8}.${i & 255}`);
  const next = keys.map(() => m.clock.now);
  const at: number[] = [];
  while (at.length < stopAt) {
    let i = 0;
    for (let j = 1; j < next.length; j++) if (next[j] < next[i]) i = j;
    if (next[i] > until) break;
    m.clock.now = Math.max(m.clock.now, next[i]);
    const r = m.auth.login('0000', keys[i]);
    if (r.ok) throw new Error('the guess was the PIN');
    const checked = r.slowedForMs === undefined && (r.lockedForMs === 0 || r.justLocked);
    if (checked) at.push(m.clock.now);
    // Checked: the next guess at once (its answer tells the wait); refused: after the wait.
    next[i] = m.clock.now + (checked ? 0 : (r.slowedForMs ?? r.lockedForMs));
  }
  return { at };
}

const ATTACKER = 254;

describe('wrong PINs from many addresses', () => {
  it('slow a guesser with all 254 addresses of a /24 to weeks for the 10,000 4-digit PINs', () => {
    const m = model();
    const t0 = m.clock.now;
    const { at } = attack(m, ATTACKER, t0 + 30 * DAY);
    const within = (ms: number) => at.filter((t) => t - t0 <= ms).length;
    // The figures of docs/driver-page.md: 3 checks an address in the first hour, 6 in the
    // first day, then 2 a day (one every 12 h).
    expect(within(HOUR)).toBeLessThanOrEqual(ATTACKER * 3 + SLOW_ALLOWANCE);
    expect(within(DAY)).toBeLessThan(1700);
    expect(at).toHaveLength(10_000);
    // Half of them (a PIN found on average), then all of them: days, not minutes.
    expect((at[4_999] - t0) / DAY).toBeGreaterThan(6);
    expect((at[9_999] - t0) / DAY).toBeGreaterThan(14);
  });

  it("check the driver's phone at once during the attack, and after a typo or two within 1 and 10 min", () => {
    const m = model();
    const t0 = m.clock.now;
    attack(m, ATTACKER, t0 + 3 * HOUR);
    m.clock.now = t0 + 3 * HOUR;
    expect(m.auth.slowing.on).toBe(true);
    const phone = '10.9.0.1';
    expect(m.auth.login(PIN, phone).ok).toBe(true);
    // A typo: its next PIN waits 1 min, whatever the guesser does meanwhile.
    expect(m.auth.login('2469', phone)).toEqual({ ok: false, lockedForMs: 0, justLocked: false });
    expect(m.auth.login(PIN, phone)).toEqual({ ok: false, lockedForMs: 0, justLocked: false, slowedForMs: SLOW_WAITS_MS[0] });
    attack(m, ATTACKER, m.clock.now + SLOW_WAITS_MS[0]);
    m.clock.now = t0 + 3 * HOUR + SLOW_WAITS_MS[0];
    expect(m.auth.slowing.on).toBe(true);
    expect(m.auth.login(PIN, phone).ok).toBe(true);
    // The right PIN wiped its typo: the next typo costs 1 min again; a second one 10 min.
    const t1 = m.clock.now;
    expect(m.auth.login('2469', phone).ok).toBe(false);
    m.clock.now += SLOW_WAITS_MS[0];
    expect(m.auth.login('2496', phone).ok).toBe(false);
    expect(m.auth.login(PIN, phone)).toMatchObject({ slowedForMs: SLOW_WAITS_MS[1] });
    attack(m, ATTACKER, m.clock.now + SLOW_WAITS_MS[1]);
    m.clock.now = t1 + SLOW_WAITS_MS[0] + SLOW_WAITS_MS[1];
    expect(m.auth.login(PIN, phone).ok).toBe(true);
  });

  it('never count a right PIN as a wrong one, nor a refused try', () => {
    const m = model();
    for (let i = 0; i < 2 * SLOW_ALLOWANCE; i++) expect(m.auth.login('0000', `10.0.0.${i}`).ok).toBe(false);
    expect(m.auth.slowing.on).toBe(true);
    const before = m.auth.slowing.recentWrong();
    for (let i = 0; i < 50; i++) expect(m.auth.login(PIN, `10.9.0.${i}`).ok).toBe(true);
    for (let i = 0; i < 50; i++) expect(m.auth.login('0000', '10.0.0.1')).toMatchObject({ slowedForMs: SLOW_WAITS_MS[0] });
    expect(m.auth.slowing.recentWrong()).toBe(before);
  });

  it('lapses by itself: the count halves every hour, and an address comes back when it lapses if that is before its turn', () => {
    const clock = { now: 0 };
    const s = new PinSlowing(() => clock.now);
    for (let i = 0; i < 3 * SLOW_ALLOWANCE; i++) s.wrong('10.0.0.1');
    // Its turn is 12 h away; 30 wrong PINs are under the allowance of 10 in log2(3) hours.
    const lapse = Math.ceil(HOUR * Math.log2(3)) + 1;
    expect(s.waitMs('10.0.0.1')).toBe(lapse);
    expect(s.waitMs('10.0.0.2')).toBe(0);
    clock.now = HOUR;
    expect(s.recentWrong()).toBeCloseTo(15);
    clock.now = lapse;
    expect(s.on).toBe(false);
    expect(s.waitMs('10.0.0.1')).toBe(0);
  });

  it('says a wait rounded up, in seconds, minutes or hours', () => {
    expect(SLOW_WAITS_MS.map(waitWords)).toEqual(['60 s', '10 min', '60 min', '4 h', '12 h']);
    expect([1, 59_001, 89_000, 90_000, 5_399_000, 5_400_000].map(waitWords)).toEqual(['1 s', '60 s', '89 s', '2 min', '90 min', '2 h']);
  });

  it('makes a new address wait when more addresses than it tracks have sent wrong PINs', () => {
    const m = model();
    for (let i = 0; i < 1024; i++) m.auth.login('0000', `10.0.${i >> 8}.${i & 255}`);
    const r = m.auth.login(PIN, '10.9.0.1');
    expect(r.ok).toBe(false);
    expect(r.ok === false && r.slowedForMs).toBeGreaterThan(0);
  });

  it('keeps the lock of one address: 5 wrong PINs lock it for 5 minutes, slowed or not', () => {
    const m = model();
    for (let i = 0; i < 4; i++) expect(m.auth.login('0000', '10.0.0.1').ok).toBe(false);
    expect(m.auth.login('0000', '10.0.0.1')).toEqual({ ok: false, lockedForMs: LOCK_MS, justLocked: true });
  });
});

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
}

/** One request from `from` (a loopback address), as a browser with its cookie jar would send it. */
function send(port: number, from: string, jar: Map<string, string>, path: string, body?: string, lang = 'en'): Promise<Answer> {
  const headers: Record<string, string | number> = { cookie: [...jar].map(([k, v]) => `${k}=${v}`).join('; '), 'accept-language': lang };
  if (body !== undefined) Object.assign(headers, { 'content-type': 'application/x-www-form-urlencoded', 'content-length': Buffer.byteLength(body) });
  return new Promise((resolve, reject) => {
    const req = (body === undefined ? httpGet : httpRequest)({ host: '127.0.0.1', port, path, method: body === undefined ? 'GET' : 'POST', localAddress: from, headers }, (res) => {
      let text = '';
      res.on('data', (c) => (text += c));
      res.on('end', () => {
        for (const c of res.headers['set-cookie'] ?? []) {
          const [kv] = c.split(';');
          const i = kv.indexOf('=');
          if (kv.slice(i + 1)) jar.set(kv.slice(0, i), kv.slice(i + 1));
          else jar.delete(kv.slice(0, i));
        }
        resolve({ status: res.statusCode ?? 0, headers: res.headers, text });
      });
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** The login form from `from`, then `pin` sent with it. */
async function tryPin(port: number, from: string, pin: string, lang = 'en'): Promise<Answer & { jar: Map<string, string> }> {
  const jar = new Map<string, string>();
  const form = await send(port, from, jar, '/', undefined, lang);
  const csrf = /name="_csrf" value="([^"]+)"/.exec(form.text)?.[1];
  return { ...(await send(port, from, jar, '/login', `_csrf=${csrf}&pin=${pin}`, lang)), jar };
}

const message = (a: Answer) => /class="error"[^>]*>([^<]*)</.exec(a.text)?.[1];

describe('the slowing over HTTP', () => {
  it('refuses a slowed address unchecked, "try again in N s" in its language, while a new one is checked and the driver gets in at once', async () => {
    const tmp = tempDir('ta-page-pin-');
    const lines: string[] = [];
    const config = pageAgentConfig(tmp.dir, 'pin-test', { pin_file: writeFile(tmp.dir, 'pin', `${PIN}\n`, 0o600) });
    const agent = new Agent({ file: '(test)', config, deviceId: 'pin-test', warnings: [] }, { key: TEST_KEY, origin: 'test' }, lineLogger(lines));
    await agent.start();
    try {
      const port = agent.effectiveSettings()['ui.port'] as number;
      // One wrong PIN from each of 20 addresses: each checked (401), far from their own lock.
      for (let i = 2; i < 22; i++) expect((await tryPin(port, `127.0.0.${i}`, '0000')).status).toBe(401);
      // A second try from one of them, with the right PIN: not checked, so nothing learnt.
      const slowed = await tryPin(port, '127.0.0.2', PIN);
      expect(slowed.status).toBe(429);
      // 1 min after its wrong PIN, less the moments since (a slow machine may take seconds).
      const wait = Number(slowed.headers['retry-after']);
      expect(wait).toBeGreaterThan(50);
      expect(wait).toBeLessThanOrEqual(60);
      expect(slowed.jar.has('ta_session')).toBe(false);
      expect(message(slowed)).toBe(`Many wrong PINs were tried on this page lately: try again in ${wait} s.`);
      const warn = lines.map((l) => JSON.parse(l)).filter((l) => l.msg.startsWith('driver page: many wrong PINs'));
      expect(warn).toHaveLength(1);
      expect(warn[0]).toMatchObject({ level: 40, msg: 'driver page: many wrong PINs; each address that sent one now waits before its next is checked' });
      expect(warn[0].recentWrong).toBeGreaterThanOrEqual(SLOW_ALLOWANCE);
      // The login page says so too, in the browser's language.
      const es = await send(port, '127.0.0.3', new Map(), '/', undefined, 'es');
      expect([es.status, message(es)]).toEqual([429, `Se han probado muchos PIN incorrectos en esta página últimamente: vuelva a intentarlo en ${es.headers['retry-after']} s.`]);
      const fr = await send(port, '127.0.0.3', new Map(), '/', undefined, 'fr-FR');
      expect(message(fr)).toBe(`Beaucoup de codes erronés ont été essayés sur cette page ces derniers temps : réessayez dans ${fr.headers['retry-after']} s.`);
      // A new address is checked at once; the driver's phone gets in at once.
      expect((await tryPin(port, '127.0.0.40', '1111')).status).toBe(401);
      const driver = await tryPin(port, '127.0.0.1', PIN);
      expect(driver.status).toBe(303);
      expect(driver.jar.get('ta_session')).toMatch(/^[\w-]+$/);
      expect((await send(port, '127.0.0.1', driver.jar, '/')).status).toBe(200);
      expect(lines.join('\n')).not.toContain(PIN);
    } finally {
      await agent.stop();
      tmp.cleanup();
    }
  });
});
