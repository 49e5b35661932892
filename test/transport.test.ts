import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ApiClient } from '../src/api/client.js';
import { addUrlSecrets } from '../src/api/transport.js';
import { Sandbox } from '../src/sandbox/server.js';
import { agentConfig, type Daemon, lineLogger, runCli, startDaemon, TEST_KEY, TEST_SCAC, waitFor, tempFixture } from './helpers.js';
import { makePki, type Pki } from './pki.js';
import { freePort, stopProcess } from './sources/support.js';

// The client's transport against real peers: the sandbox serving HTTPS with a certificate a
// private CA made by openssl signed, and Debian's tinyproxy started on a free port.

const tmp = tempFixture('ta-transport-');
let sandbox: Sandbox | undefined;
let client: ApiClient | undefined;
let daemon: Daemon | undefined;
let proxy: ChildProcess | undefined;
let pki: Pki;

beforeEach(() => {
  pki = makePki(tmp.dir);
});
afterEach(async () => {
  await daemon?.stop('SIGKILL');
  daemon = undefined;
  await client?.close();
  client = undefined;
  await sandbox?.stop();
  sandbox = undefined;
  await stopProcess(proxy);
  proxy = undefined;
});

async function httpsSandbox(): Promise<string> {
  sandbox = new Sandbox({ key: TEST_KEY, scac: TEST_SCAC, tls: { cert: pki.cert, key: pki.key } });
  return (await sandbox.start()).url;
}

function makeClient(baseUrl: string, more: Partial<ConstructorParameters<typeof ApiClient>[0]> = {}): ApiClient {
  client = new ApiClient({ baseUrl, milestonePath: '/m', tracePath: '/rcsc/events/v1/loads/trace-requests', scac: TEST_SCAC, subscriptionKey: TEST_KEY, timeoutMs: 5000, ...more });
  return client;
}

const traceBody = { loadNumber: 'L-1', traces: [] };

/** tinyproxy on a free loopback port, logging every request at its most verbose level. */
async function startProxy(): Promise<{ url: string; log: () => string }> {
  const port = await freePort();
  const logFile = join(tmp.dir, 'tinyproxy.log');
  const conf = join(tmp.dir, 'tinyproxy.conf');
  writeFileSync(conf, `Port ${port}\nListen 127.0.0.1\nTimeout 30\nLogFile "${logFile}"\nLogLevel Info\nMaxClients 20\nAllow 127.0.0.1\n`);
  const p = spawn('tinyproxy', ['-d', '-c', conf], { stdio: 'ignore' });
  proxy = p;
  const spawned = await new Promise<NodeJS.ErrnoException | undefined>((r) => {
    p.once('error', r);
    p.once('spawn', () => r(undefined));
  });
  if (spawned) throw new Error(spawned.code === 'ENOENT' ? 'tinyproxy is not installed: apt-get install tinyproxy' : spawned.message);
  const log = () => {
    try {
      return readFileSync(logFile, 'utf8');
    } catch {
      return '';
    }
  };
  await waitFor(() => log().includes('Accepting connections'), 10_000, 'tinyproxy listening');
  return { url: `http://127.0.0.1:${port}`, log };
}

describe('TLS with a private CA (api.ca_file)', () => {
  it('trusts the CA it is given, besides the public ones', async () => {
    const url = await httpsSandbox();
    const out = await makeClient(url, { ca: readFileSync(pki.caFile, 'utf8') }).postTraces(traceBody, 'k1');
    expect(out).toMatchObject({ kind: 'response' });
    expect(sandbox!.stats.requests).toBe(1);
  });

  it('without it, or with the wrong CA, fails as a network error that says what to do', async () => {
    const url = await httpsSandbox();
    const none = await makeClient(url).postTraces(traceBody, 'k1');
    expect(none).toMatchObject({ kind: 'network', code: 'UNABLE_TO_VERIFY_LEAF_SIGNATURE' });
    if (none.kind === 'network') expect(none.error).toMatch(/^TLS: the service's certificate could not be verified .*set api\.ca_file/);
    await client!.close();
    const wrong = await makeClient(url, { ca: readFileSync(pki.otherCaFile, 'utf8') }).postTraces(traceBody, 'k2');
    expect(wrong.kind).toBe('network');
    if (wrong.kind === 'network') expect(wrong.error).toMatch(/api\.ca_file does not hold the CA that signed it/);
    expect(sandbox!.stats.requests).toBe(0);
  });

  it('validate-config refuses a CA file that cannot be read or holds no certificate (exit 78, naming api.ca_file)', async () => {
    const missing = agentConfig(tmp.dir, 'https://127.0.0.1:1', '', { api: `ca_file = "${join(tmp.dir, 'nope.pem')}"` });
    const r1 = await runCli(['validate-config', '--config', missing]);
    expect(r1.code).toBe(78);
    expect(r1.stderr).toMatch(/api\.ca_file: cannot read .*nope\.pem \(ENOENT\)/);
    writeFileSync(join(tmp.dir, 'junk.pem'), 'not a certificate\n');
    const junk = agentConfig(tmp.dir, 'https://127.0.0.1:1', '', { api: 'ca_file = "junk.pem"' });
    const r2 = await runCli(['validate-config', '--config', junk]);
    expect(r2.code).toBe(78);
    expect(r2.stderr).toMatch(/api\.ca_file: .*junk\.pem holds no PEM certificate/);
    const good = agentConfig(tmp.dir, 'https://127.0.0.1:1', '', { api: `ca_file = "${pki.caFile}"` });
    expect((await runCli(['validate-config', '--config', good])).code).toBe(0);
  });

  it('the daemon with the wrong CA keeps the milestone and retries it; with the right one after SIGHUP, it is delivered once', async () => {
    const url = await httpsSandbox();
    const conf = (ca: string) => agentConfig(tmp.dir, url, '', { api: `ca_file = "${ca}"` });
    const cfg = conf(pki.otherCaFile);
    expect((await runCli(['load', 'start', 'L-1', '--resource', 'TRUCK-1', '--config', cfg])).code).toBe(0);
    daemon = startDaemon(['--config', cfg]);
    await daemon!.started('the daemon started');
    expect((await runCli(['milestone', '--load', 'L-1', '--code', 'X3', '--lat', '41.88', '--lon', '-87.63', '--config', cfg])).code).toBe(0);
    // Tried, refused by our side's TLS check, and tried again: a network error, not a dead letter.
    await waitFor(() => (daemon!.output().match(/api\.ca_file does not hold the CA/g) ?? []).length >= 2, 15_000, 'two failed attempts');
    const listed = await runCli(['milestone', 'list', '--load', 'L-1', '--json', '--config', cfg]);
    expect(JSON.parse(listed.stdout)).toMatchObject([{ code: 'X3', state: 'pending' }]);
    expect((await runCli(['dead-letter', 'list', '--json', '--config', cfg])).stdout.trim()).toBe('[]');
    expect(sandbox!.milestones).toHaveLength(0);

    conf(pki.caFile);
    daemon.child.kill('SIGHUP');
    await waitFor(() => sandbox!.milestones.length === 1, 15_000, 'the milestone delivered after the reload');
    expect(sandbox!.milestones[0].body).toMatchObject({ eventCode: 'X3', loadNumber: 'L-1' });
    expect((await daemon.stop()).code).toBe(0);
    expect(sandbox!.milestones).toHaveLength(1);
  });
});

describe('proxies (tinyproxy)', () => {
  it('HTTPS_PROXY from the environment: the request reaches the service through the proxy, and the key is not in its log', async () => {
    const p = await startProxy();
    const url = await httpsSandbox();
    const cfg = agentConfig(tmp.dir, url, '', { api: `ca_file = "${pki.caFile}"` });
    expect((await runCli(['load', 'start', 'L-1', '--resource', 'TRUCK-1', '--config', cfg])).code).toBe(0);
    daemon = startDaemon(['--config', cfg], { HTTPS_PROXY: p.url, NO_PROXY: '' });
    expect((await runCli(['milestone', '--load', 'L-1', '--code', 'X3', '--lat', '41.88', '--lon', '-87.63', '--config', cfg])).code).toBe(0);
    await waitFor(() => sandbox!.milestones.length === 1, 15_000, 'the milestone through the proxy');
    const port = new URL(url).port;
    expect(p.log()).toMatch(new RegExp(`CONNECT 127\\.0\\.0\\.1:${port}`));
    expect(daemon.output()).toContain(`"proxy":"${p.url}/ ($HTTPS_PROXY)"`);
    expect(p.log()).not.toContain(TEST_KEY);
  });

  it('api.proxy overrides the environment; "direct" ignores it; NO_PROXY is honoured', async () => {
    const p = await startProxy();
    // Nothing listens on the environment's proxy: a request that used it would fail.
    const dead = `http://127.0.0.1:${await freePort()}`;
    sandbox = new Sandbox({ key: TEST_KEY, scac: TEST_SCAC });
    const url = (await sandbox.start()).url;
    const port = new URL(url).port;
    const env = { HTTP_PROXY: dead, http_proxy: dead, NO_PROXY: '', no_proxy: '' };
    const viaConfig = makeClient(url, { proxy: p.url });
    const before = process.env;
    process.env = { ...before, ...env };
    try {
      expect(await viaConfig.postTraces(traceBody, 'a')).toMatchObject({ kind: 'response' });
      expect(p.log()).toMatch(new RegExp(`CONNECT 127\\.0\\.0\\.1:${port}`));
      await viaConfig.close();
      expect(await makeClient(url, { proxy: 'direct' }).postTraces(traceBody, 'b')).toMatchObject({ kind: 'response' });
      await client!.close();
      const fromEnv = await makeClient(url).postTraces(traceBody, 'c');
      expect(fromEnv).toMatchObject({ kind: 'network', code: 'ECONNREFUSED' });
      await client!.close();
      process.env.NO_PROXY = '127.0.0.1';
      process.env.no_proxy = '127.0.0.1';
      expect(await makeClient(url).postTraces(traceBody, 'd')).toMatchObject({ kind: 'response' });
    } finally {
      process.env = before;
    }
    expect(sandbox.stats.requests).toBe(3);
    expect((p.log().match(/CONNECT 127\.0\.0\.1/g) ?? []).length).toBe(1);
  });

  it("a password in api.base_url is scrubbed from a log line, as a proxy's is", () => {
    const lines: string[] = [];
    const log = lineLogger(lines);
    addUrlSecrets({ base_url: 'https://carrier:b4se-url-pass@logistics.example' });
    log.warn({ url: 'https://carrier:b4se-url-pass@logistics.example/x' }, 'request to https://carrier:b4se-url-pass@logistics.example failed');
    expect(lines).toHaveLength(1);
    expect(lines[0]).not.toContain('b4se-url-pass');
    expect(lines[0]).toContain('request to https://carrier:');
  });

  it('a proxy password never reaches a log line or an error', async () => {
    const secret = 's3cret-proxy-pass';
    const dead = `http://fleet:${secret}@127.0.0.1:${await freePort()}`;
    const out = await makeClient('http://127.0.0.1:9/', { proxy: dead }).postTraces(traceBody, 'a');
    expect(out.kind).toBe('network');
    expect(JSON.stringify(out)).not.toContain(secret);
    const cfg = agentConfig(tmp.dir, 'http://127.0.0.1:9', '', { api: `proxy = "${dead}"` });
    const json = await runCli(['validate-config', '--json', '--config', cfg]);
    expect(json.code).toBe(0);
    expect(json.stdout).not.toContain(secret);
    expect(JSON.parse(json.stdout).api.proxy).toBe(dead.replace(secret, '***').concat('/'));
  });
});
