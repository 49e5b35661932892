/**
 * What the commands refuse before they act: each wrong argument is a usage error (64) or bad
 * input (65) naming the option, nothing is written, connected to or left behind, and nothing
 * secret is echoed back.
 */
import { existsSync, mkdirSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { agentConfig, runCli, writeFile, cliFixture } from './helpers.js';

const fx = cliFixture();

describe('fleet send', () => {
  // A host that does not resolve: a command that got as far as connecting fails with 1.
  const send = (url: string, ...more: string[]) => {
    const pw = writeFile(fx.dir, 'bpw', 'broker-password-7f3a\n', 0o600);
    return runCli(['fleet', 'send', '--url', url, '--device', 'd1', 'status', '--username', 'ops', '--password-file', pw, ...more]);
  };

  it.each([
    ['tcp://vm.invalid:18830', 'tcp:'],
    ['http://vm.invalid', 'http:'],
    ['ssl://vm.invalid:8883', 'ssl:'],
  ])('refuses %s as the daemon refuses it in [fleet] url: exit 64 naming --url', async (url, scheme) => {
    const r = await send(url);
    expect({ code: r.code, stderr: r.stderr }).toEqual({ code: 64, stderr: `error: --url: expected mqtt://, mqtts://, ws:// or wss://, not ${scheme}//\n` });
  });

  it('refuses a plain connection to another host with the config rule, and a password in the URL', async () => {
    const plain = await send('mqtt://vm.invalid:18830');
    expect({ code: plain.code, stderr: plain.stderr }).toEqual({
      code: 64,
      stderr: 'error: --url: a plain mqtt:// connection to vm.invalid would carry the password and every load in clear: use mqtts:// or wss://, or add --allow-plaintext\n',
    });
    const inUrl = await runCli(['fleet', 'send', '--url', 'mqtts://ops:s3cret-in-url@vm.invalid', '--device', 'd1', 'status']);
    expect(inUrl.code).toBe(64);
    expect(inUrl.stderr).toBe('error: --url: a password in the URL: give it with --password-file, and the user name with --username\n');
    expect(await runCli(['fleet', 'send', '--url', 'not a url', '--device', 'd1', 'status'])).toMatchObject({
      code: 64,
      stderr: 'error: --url: expected a URL such as mqtts://broker.example.com:8883\n',
    });
  });

  it.each(['abc', '-1', '0', '1e9', ''])('refuses --timeout %j with exit 64 naming --timeout', async (timeout) => {
    const r = await send('mqtts://vm.invalid:8883', '--timeout', timeout);
    expect({ code: r.code, stderr: r.stderr }).toEqual({ code: 64, stderr: `error: --timeout: expected seconds from 1 to 86400, got ${JSON.stringify(timeout)}\n` });
  });
});

describe('load start', () => {
  it.each([
    ['', '--resource: expected 1 to 64 characters, got ""'],
    ['T'.repeat(65), '--resource: expected 1 to 64 characters, got 65 characters'],
  ])('refuses the resource id %j with exit 65 before the buffer is made', async (resource, message) => {
    const r = await runCli(['load', 'start', 'L1', '--resource', resource, '--config', fx.cfg]);
    expect({ code: r.code, stderr: r.stderr }).toEqual({ code: 65, stderr: `error: ${message}\n` });
    expect(existsSync(fx.buffer)).toBe(false);
  });

  it('refuses an empty load number even when api.load_number_pattern would take it', async () => {
    const loose = agentConfig(fx.dir, 'http://127.0.0.1:9', '', { api: 'load_number_pattern = ".*"' });
    const r = await runCli(['load', 'start', '', '--resource', 'T1', '--config', loose]);
    expect({ code: r.code, stderr: r.stderr }).toEqual({ code: 65, stderr: 'error: <loadNumber>: expected 1 to 64 characters, got ""\n' });
    expect(existsSync(fx.buffer)).toBe(false);
  });
});

describe('load start on a resource no source feeds', () => {
  const sources = '[[sources]]\ntype = "simulator"\nresource_id = "TRUCK-1"\n[[sources]]\ntype = "onewire"\nsensors = { "28-0316a2792aff" = "REEFER-1" }\n';
  it('starts it, and warns that it gets no positions, suggesting the configured id that differs only in case', async () => {
    const fed = agentConfig(fx.dir, 'http://127.0.0.1:9', sources);
    const typo = await runCli(['load', 'start', 'L1', '--resource', 'truck-1', '--config', fed]);
    expect(typo.code).toBe(0);
    expect(typo.stderr).toBe(
      'warning: resourceId "truck-1": the sources tag their readings "TRUCK-1", "REEFER-1", so this load gets no positions (did you mean "TRUCK-1"? resource ids are case-sensitive); end it and start it on the right resource, or add a source for it\n',
    );
    for (const resource of ['TRUCK-1', 'REEFER-1']) {
      const ok = await runCli(['load', 'start', `L-${resource}`, '--resource', resource, '--config', fed]);
      expect({ code: ok.code, stderr: ok.stderr }).toEqual({ code: 0, stderr: '' });
    }
  });

  it('says nothing when a source names the resource of each reading itself (exec, mqtt, module)', async () => {
    const r = await runCli(['load', 'start', 'L1', '--resource', 'ANY-9', '--config', fx.cfg]);
    expect({ code: r.code, stderr: r.stderr }).toEqual({ code: 0, stderr: '' });
  });
});

describe('milestone', () => {
  it.each(['0', 'abc', '-1', '1.5', ''])('refuses --stop %j with exit 64 naming --stop, before the buffer is opened', async (stop) => {
    const r = await runCli(['milestone', '--load', 'L1', '--code', 'X3', '--stop', stop, '--config', fx.cfg]);
    expect({ code: r.code, stderr: r.stderr }).toEqual({ code: 64, stderr: `error: --stop: expected a whole number from 1, got ${JSON.stringify(stop)}\n` });
    expect(existsSync(join(fx.dir, 'buffer.db'))).toBe(false);
  });
});

describe('sandbox', () => {
  it.each(['abcd', 'A', 'ABCDE', 'AB1'])('refuses --scac %j, which no agent could send (api.scac takes 2-4 capitals): exit 64', async (scac) => {
    const r = await runCli(['sandbox', '--port', '0', '--key', 'k', '--scac', scac]);
    expect({ code: r.code, stdout: r.stdout, stderr: r.stderr }).toEqual({
      code: 64,
      stdout: '',
      stderr: `error: --scac: expected a 2-4 letter SCAC code in capitals, as api.scac takes it, got ${JSON.stringify(scac)}\n`,
    });
  });
});

describe('demo', () => {
  it.each(['abc', '0', '-5', '1000000', ''])('refuses --time-scale %j with exit 64 and leaves no directory behind', async (scale) => {
    const own = join(fx.dir, 'tmp');
    mkdirSync(own);
    const r = await runCli(['demo', '--time-scale', scale], { env: { TMPDIR: own } });
    expect({ code: r.code, stderr: r.stderr, stdout: r.stdout }).toEqual({
      code: 64,
      stderr: `error: --time-scale: expected a number > 0 and <= 100000 (simulated seconds per real second), got ${JSON.stringify(scale)}\n`,
      stdout: '',
    });
    expect(readdirSync(own)).toEqual([]);
  });
});

describe('dead-letter retry', () => {
  function park(n: number): void {
    fx.withBuffer((store) => {
      store.startLoad({ loadNumber: 'L1', resourceId: 'T1', resourceType: 'Truck', stops: [], nowMs: 1 });
      store.insertReadings(Array.from({ length: n }, (_, i) => ({ resourceId: 'T1', timeMs: Date.now() - 60_000 + i, lat: 41.8, lon: -87.6 })));
      for (const r of [...store.iterateReadings('L1')]) store.parkReading(r.id, 'L1', 400, 'refused', {}, 1);
    });
  }
  const deadLetters = () => fx.withBuffer((s) => s.listDeadLetters().map((d) => d.id));

  it('counts an id given twice once', async () => {
    park(2);
    const r = await runCli(['dead-letter', 'retry', '--id', '1', '1', '--config', fx.cfg]);
    expect({ code: r.code, stdout: r.stdout, stderr: r.stderr }).toEqual({ code: 0, stdout: '1 dead letter(s) put back in the queue\n', stderr: '' });
    expect(deadLetters()).toEqual([2]);
  });

  it('puts nothing back when one of the ids is not a dead letter: exit 65 naming it', async () => {
    park(2);
    const r = await runCli(['dead-letter', 'retry', '--id', '2', '999', '7', '--config', fx.cfg]);
    expect({ code: r.code, stdout: r.stdout, stderr: r.stderr }).toEqual({
      code: 65,
      stdout: '',
      stderr: 'error: no dead letter has the id 7, 999 (see "dead-letter list"); nothing put back\n',
    });
    expect(deadLetters()).toEqual([1, 2]);
  });
});

describe('config problems', () => {
  it('name the file and line of a TOML syntax error, as every other problem does', async () => {
    const bad = writeFile(fx.dir, 'c.toml', '[api]\nscac = "ABCD"\ntimeout_s = = 5\n');
    const r = await runCli(['validate-config', '--config', bad]);
    expect(r.code).toBe(78);
    expect(r.stderr).toMatch(new RegExp(`^${bad}: invalid configuration\n  ${bad}:3:13: TOML syntax error: `));
  });
});
