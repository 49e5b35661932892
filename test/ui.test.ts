/**
 * The driver's page below the browser: its [ui] settings and their rules, word for word; the
 * language a request gets; the lock after wrong PINs and its end; the session cookie over
 * TLS; request bodies capped. The page runs in a real agent on a real buffer file.
 */
import { mkdirSync, readFileSync } from 'node:fs';
import { get as httpGet, request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Agent } from '../src/agent.js';
import { ConfigError, type LoadedConfig, parseConfigText } from '../src/config/load.js';
import { createLogger } from '../src/log.js';
import { Auth, clientKey, LOCK_MS, readPin } from '../src/ui/auth.js';
import { EVENT_CODES, REASON_CODES } from '../src/milestones/codes.js';
import { eventName, reasonName } from '../src/ui/actions.js';
import { EVENT_NAMES, REASON_NAMES } from '../src/ui/code-names.js';
import { pickLanguage } from '../src/ui/i18n.js';
import { agentConfig, lineLogger, pageAgentConfig, runCli, TEST_KEY, tempDir, writeFile } from './helpers.js';
import { makePki } from './pki.js';

const SRC = '[api]\nscac = "ABCD"\n[[sources]]\ntype = "simulator"\nresource_id = "T1"\n';

function problems(ui: string): string[] {
  try {
    parseConfigText(`${SRC}[ui]\n${ui}`, 'agent.toml', '/etc/telematics-agent');
    return [];
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    return (e as ConfigError).problems;
  }
}

describe('[ui] settings', () => {
  it('is off by default, and a loopback page needs neither a PIN nor TLS', () => {
    const c = parseConfigText(SRC, 'agent.toml', '/etc/telematics-agent');
    expect(c.ui).toEqual({ allow_plaintext: false });
    expect(problems('listen = "127.0.0.1:8090"')).toEqual([]);
    expect(problems('listen = "[::1]:8090"')).toEqual([]);
  });

  it('a page on the network needs a PIN file, and TLS unless plain HTTP is allowed', () => {
    expect(problems('listen = "0.0.0.0:8090"')).toEqual([
      'ui.pin_file: required when listen (0.0.0.0:8090) is not a loopback address: anyone on the network could record milestones',
      'ui.tls_cert: required when listen (0.0.0.0:8090) is not a loopback address (the PIN would cross the network readable); or set ui.allow_plaintext = true',
    ]);
    expect(problems('listen = "0.0.0.0:8090"\npin_file = "pin"\nallow_plaintext = true')).toEqual([]);
    expect(problems('listen = "0.0.0.0:8090"\npin_file = "pin"\ntls_cert = "c.pem"')).toEqual(['ui.tls_key: tls_cert and tls_key go together']);
    expect(problems('listen = "8090"\nlanguage = "de"')).toEqual(['ui.listen: expected host:port such as 127.0.0.1:8090 or 0.0.0.0:8090, got "8090"', 'ui.language: expected one of "en", "es", "fr", got "de"']);
  });

  it("takes relative paths from the config file's directory", () => {
    const c = parseConfigText(`${SRC}[ui]\nlisten = "0.0.0.0:1"\npin_file = "pin"\ntls_cert = "c.pem"\ntls_key = "k.pem"\n`, 'agent.toml', '/etc/telematics-agent');
    expect(c.ui).toMatchObject({ pin_file: '/etc/telematics-agent/pin', tls_cert: '/etc/telematics-agent/c.pem', tls_key: '/etc/telematics-agent/k.pem' });
  });

  it("the language: ui.language, else the browser's first the page has, else English", () => {
    expect(pickLanguage(undefined, 'fr-CA,fr;q=0.9,en;q=0.8')).toBe('fr');
    expect(pickLanguage(undefined, 'de-DE,de;q=0.9,es;q=0.5')).toBe('es');
    expect(pickLanguage(undefined, 'en;q=0.2,es;q=0.8')).toBe('es');
    expect(pickLanguage(undefined, 'de')).toBe('en');
    expect(pickLanguage(undefined, undefined)).toBe('en');
    expect(pickLanguage('fr', 'es')).toBe('fr');
  });
});

describe("validate-config and run check [ui]'s files (real CLI)", () => {
  it('a PIN file that cannot be read or is not 4-8 digits, a certificate or key that cannot be read, parsed or paired: exit 78, naming the field, never the PIN', async () => {
    const tmp = tempDir('ta-ui-files-');
    try {
      makePki(tmp.dir);
      mkdirSync(join(tmp.dir, 'other'));
      makePki(join(tmp.dir, 'other'));
      const secret = '123456789012';
      const config = (ui: string) => agentConfig(tmp.dir, 'http://127.0.0.1:9', `[ui]\nlisten = "0.0.0.0:0"\n${ui}`);
      const pinFile = writeFile(tmp.dir, 'pin', `${secret}\n`, 0o600);
      const notPem = writeFile(tmp.dir, 'not.pem', 'hello\n');
      let cfg = config(`pin_file = "${pinFile}"\ntls_cert = "${join(tmp.dir, 'absent.crt')}"\ntls_key = "${notPem}"\n`);
      for (const cmd of [['validate-config'], ['run']]) {
        const r = await runCli([...cmd, '--config', cfg], { timeoutMs: 15_000 });
        expect(r.code, `${cmd}: ${r.stderr}`).toBe(78);
        expect(r.stderr).toContain(`ui.pin_file: ${pinFile}: expected a PIN of 4-8 digits`);
        expect(r.stderr).toContain(`ui.tls_cert: cannot read ${join(tmp.dir, 'absent.crt')} (ENOENT)`);
        expect(r.stderr).toContain(`ui.tls_key: ${notPem} holds no private key that can be read`);
        // Each named with the line it was written on.
        expect(r.stderr).toMatch(/agent\.toml:\d+: ui\.pin_file: /);
        expect(r.stdout + r.stderr).not.toContain(secret);
      }
      // A certificate that is not PEM, a PIN file not there, a key that is another certificate's.
      cfg = config(`pin_file = "${join(tmp.dir, 'none')}"\ntls_cert = "${notPem}"\ntls_key = "${join(tmp.dir, 'server.key')}"\n`);
      let r = await runCli(['validate-config', '--config', cfg]);
      expect(r.code).toBe(78);
      expect(r.stderr).toContain(`ui.pin_file: ${join(tmp.dir, 'none')}: cannot read (ENOENT)`);
      expect(r.stderr).toContain(`ui.tls_cert: ${notPem} holds no PEM certificate`);
      cfg = config(`pin_file = "${writeFile(tmp.dir, 'pin', '4821\n', 0o600)}"\ntls_cert = "${join(tmp.dir, 'server.pem')}"\ntls_key = "${join(tmp.dir, 'other', 'server.key')}"\n`);
      r = await runCli(['validate-config', '--config', cfg]);
      expect(r.code).toBe(78);
      expect(r.stderr).toContain(`ui.tls_key: ${join(tmp.dir, 'other', 'server.key')} is not the key of ui.tls_cert (${join(tmp.dir, 'server.pem')})`);
      // The right pair and a good PIN: ok.
      cfg = config(`pin_file = "${join(tmp.dir, 'pin')}"\ntls_cert = "${join(tmp.dir, 'server.pem')}"\ntls_key = "${join(tmp.dir, 'server.key')}"\n`);
      r = await runCli(['validate-config', '--config', cfg]);
      expect(r.stderr).not.toContain('ui.');
      expect(r.code, r.stderr).toBe(0);
    } finally {
      tmp.cleanup();
    }
  });
});

describe("the codes' names on the page", () => {
  it('has every code of the lists in Spanish and French, and nothing more; a code with no name shows as it is', () => {
    for (const lang of ['es', 'fr'] as const) {
      expect(Object.keys(EVENT_NAMES[lang]).sort()).toEqual(Object.keys(EVENT_CODES).sort());
      expect(Object.keys(REASON_NAMES[lang]).sort()).toEqual(Object.keys(REASON_CODES).sort());
    }
    expect(eventName('X3', 'es')).toBe('llegada al lugar de recogida (X3)');
    expect(eventName('X3', 'fr')).toBe('arrivé au lieu de chargement (X3)');
    expect(eventName('X3')).toBe('arrived at pick-up location (X3)');
    expect(reasonName('AI', 'es')).toBe('avería mecánica (AI)');
    expect(reasonName('AI', 'fr')).toBe('panne mécanique (AI)');
    expect(eventName('ZZ', 'fr')).toBe('ZZ');
  });
});

describe('PIN and lock', () => {
  it('a PIN file holds 4-8 digits; its content is never in the message', () => {
    const tmp = tempDir('ta-pin-');
    try {
      expect(readPin(writeFile(tmp.dir, 'a', '0042\n'))).toBe('0042');
      const bad = writeFile(tmp.dir, 'b', 'secret-word\n');
      expect(() => readPin(bad)).toThrow(`ui.pin_file: ${bad}: expected a PIN of 4-8 digits`);
      expect(() => readPin(join(tmp.dir, 'none'))).toThrow(`ui.pin_file: ${join(tmp.dir, 'none')}: cannot read (ENOENT)`);
    } finally {
      tmp.cleanup();
    }
  });

  it('5 wrong PINs from one address lock the login for that address for 5 minutes, the right PIN included; then it opens again', () => {
    let now = 1_000_000;
    const auth = new Auth('1234', () => now);
    const a = '10.0.0.7';
    for (let i = 0; i < 4; i++) expect(auth.login('9999', a)).toEqual({ ok: false, lockedForMs: 0, justLocked: false });
    expect(auth.login('9999', a)).toEqual({ ok: false, lockedForMs: LOCK_MS, justLocked: true });
    expect(auth.login('1234', a)).toMatchObject({ ok: false, justLocked: false });
    // Another device on the same Wi-Fi (the driver's phone) is not locked out.
    expect(auth.lockedForMs('10.0.0.8')).toBe(0);
    expect(auth.login('1234', '10.0.0.8').ok).toBe(true);
    now += LOCK_MS - 1;
    expect(auth.login('1234', a).ok).toBe(false);
    now += 1;
    const r = auth.login('1234', a);
    expect(r.ok).toBe(true);
    expect(auth.session(r.ok ? r.session.id : undefined)).toBeDefined();
  });

  it('counts an IPv4 address written as IPv6 as itself, and an IPv6 client by its /64', () => {
    expect(clientKey('::ffff:127.0.0.2')).toBe('127.0.0.2');
    expect(clientKey('127.0.0.2')).toBe('127.0.0.2');
    expect(clientKey('2001:db8:0:1::5')).toBe('2001:db8:0:1::/64');
    expect(clientKey('2001:db8:0:1:a:b:c:d')).toBe('2001:db8:0:1::/64');
    expect(clientKey('fe80::1%wlan0')).toBe('fe80:0:0:0::/64');
    expect(clientKey('::1')).toBe('0:0:0:0::/64');
    // A phone that changes its privacy address stays locked.
    const auth = new Auth('1234');
    for (let i = 0; i < 5; i++) auth.login('0000', clientKey(`2001:db8:0:1::${i + 1}`));
    expect(auth.lockedForMs(clientKey('2001:db8:0:1::99'))).toBeGreaterThan(0);
    expect(auth.lockedForMs(clientKey('2001:db8:0:2::1'))).toBe(0);
  });
});

describe('the lock over HTTP, per client address', () => {
  it('5 wrong PINs from 127.0.0.2 lock 127.0.0.2 (logged, naming it), while 127.0.0.1 logs in', async () => {
    const tmp = tempDir('ta-ui-lock-');
    const lines: string[] = [];
    const config = pageAgentConfig(tmp.dir, 'lock-test', { pin_file: writeFile(tmp.dir, 'pin', '2468\n', 0o600) });
    const agent = new Agent({ file: '(test)', config, deviceId: 'lock-test', warnings: [] }, { key: TEST_KEY, origin: 'test' }, lineLogger(lines));
    await agent.start();
    try {
      const port = agent.effectiveSettings()['ui.port'] as number;
      const attacker = await loginForm(port, '127.0.0.2');
      for (let i = 0; i < 4; i++) expect((await postLogin(port, '127.0.0.2', attacker, '0000')).status).toBe(401);
      expect((await postLogin(port, '127.0.0.2', attacker, '0000')).status).toBe(429);
      // Locked: the right PIN too, and the login page says so.
      expect((await postLogin(port, '127.0.0.2', attacker, '2468')).status).toBe(429);
      expect((await loginForm(port, '127.0.0.2')).status).toBe(429);
      const warn = lines.map((l) => JSON.parse(l)).find((l) => l.msg === 'driver page: 5 wrong PINs; login locked for this address');
      expect(warn).toMatchObject({ level: 40, client: '127.0.0.2', lockedS: 300 });
      // The driver, from another address: the page is open to the right PIN.
      const driver = await loginForm(port, '127.0.0.1');
      expect(driver.status).toBe(200);
      const ok = await postLogin(port, '127.0.0.1', driver, '2468');
      expect(ok.status).toBe(303);
      expect(String(ok.headers['set-cookie'])).toMatch(/ta_session=[\w-]+/);
      expect(lines.join('\n').replace(/"time":\d+/g, '')).not.toContain('2468'); // a timestamp may hold the digits
    } finally {
      await agent.stop();
      tmp.cleanup();
    }
  });
});

interface LoginForm {
  status: number;
  cookie: string;
  csrf: string;
}

/** GET / from `localAddress`: the login form's token and its cookie. */
function loginForm(port: number, localAddress: string): Promise<LoginForm> {
  return new Promise((resolve, reject) => {
    httpGet({ host: '127.0.0.1', port, path: '/', localAddress }, (res) => {
      let body = '';
      res.on('data', (c) => (body += c));
      res.on('end', () => {
        const cookie = String(res.headers['set-cookie']?.[0] ?? '').split(';')[0];
        resolve({ status: res.statusCode ?? 0, cookie, csrf: /name="_csrf" value="([^"]+)"/.exec(body)?.[1] ?? '' });
      });
    }).on('error', reject);
  });
}

function postLogin(port: number, localAddress: string, form: LoginForm, pin: string): Promise<{ status: number; headers: Record<string, string | string[] | undefined> }> {
  const body = `_csrf=${form.csrf}&pin=${pin}`;
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      { host: '127.0.0.1', port, path: '/login', method: 'POST', localAddress, headers: { cookie: form.cookie, 'content-type': 'application/x-www-form-urlencoded', 'content-length': Buffer.byteLength(body) } },
      (res) => {
        res.resume();
        resolve({ status: res.statusCode ?? 0, headers: res.headers });
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

describe('the page over TLS', () => {
  let tmp: ReturnType<typeof tempDir>;
  let agent: Agent | undefined;
  beforeEach(() => {
    tmp = tempDir('ta-ui-tls-');
  });
  afterEach(async () => {
    await agent?.stop();
    agent = undefined;
    tmp.cleanup();
  });

  it('sets its cookies Secure, HttpOnly and SameSite=Strict, and refuses a body over the cap', async () => {
    const ca = readFileSync(makePki(tmp.dir).caFile, 'utf8');
    const config = pageAgentConfig(tmp.dir, 'tls-test', { pin_file: writeFile(tmp.dir, 'pin', '2468\n', 0o600), tls_cert: join(tmp.dir, 'server.pem'), tls_key: join(tmp.dir, 'server.key') });
    const loaded: LoadedConfig = { file: '(test)', config, deviceId: 'tls-test', warnings: [] };
    agent = new Agent(loaded, { key: TEST_KEY, origin: 'test' }, createLogger({ level: 'silent', destination: process.stdout }));
    await agent.start();
    const port = agent.effectiveSettings()['ui.port'] as number;
    const get = await https(port, 'GET', '/', ca);
    expect(get.status).toBe(200);
    expect(get.headers['set-cookie']).toEqual([expect.stringMatching(/^ta_login=[\w-]{32}; Path=\/; HttpOnly; SameSite=Strict; Secure$/)]);
    const big = await https(port, 'POST', '/login', ca, 'pin='.padEnd(9000, '1'));
    expect(big.status).toBe(413);
  });
});

describe('a loopback page without a PIN', () => {
  it('answers only to a loopback Host: a DNS-rebound name gets 403', async () => {
    const tmp = tempDir('ta-ui-host-');
    const config = pageAgentConfig(tmp.dir, 'host-test');
    const agent = new Agent({ file: '(test)', config, deviceId: 'host-test', warnings: [] }, { key: TEST_KEY, origin: 'test' }, createLogger({ level: 'silent', destination: process.stdout }));
    await agent.start();
    try {
      const port = agent.effectiveSettings()['ui.port'] as number;
      const status = (host: string) =>
        new Promise<number>((resolve, reject) =>
          httpGet({ host: '127.0.0.1', port, path: '/', headers: { host } }, (res) => {
            res.resume();
            resolve(res.statusCode ?? 0);
          }).on('error', reject),
        );
      expect(await status(`127.0.0.1:${port}`)).toBe(200);
      expect(await status(`localhost:${port}`)).toBe(200);
      expect(await status(`rebind.attacker.example:${port}`)).toBe(403);
    } finally {
      await agent.stop();
      tmp.cleanup();
    }
  });
});

function https(port: number, method: string, path: string, ca: string, body?: string): Promise<{ status: number; headers: Record<string, string | string[] | undefined> }> {
  return new Promise((resolve, reject) => {
    const req = httpsRequest({ host: '127.0.0.1', port, path, method, ca, headers: body ? { 'content-type': 'application/x-www-form-urlencoded', 'content-length': Buffer.byteLength(body) } : {} }, (res) => {
      res.resume();
      resolve({ status: res.statusCode ?? 0, headers: res.headers });
    });
    req.on('error', reject);
    req.end(body);
  });
}
