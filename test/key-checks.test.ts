/**
 * The subscription key, checked like the rest of the config: a key that cannot be sent in a
 * header is refused at start, by validate-config and on a reload, naming where it came from;
 * a problem with it never shows its value; and a refused key is blamed on its own origin.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Store } from '../src/buffer/store.js';
import { agentConfig, daemonFixture, runCli, startDaemon, waitFor, type Daemon } from './helpers.js';

const fx = daemonFixture({ prefix: 'ta-key-' });

function daemon(cfg: string): Daemon {
  const d = startDaemon(['--config', cfg]);
  fx.daemon = d;
  return d;
}

/** A config whose key is inline (`lines` in [api]), without the key file agentConfig writes. */
function inlineKey(url: string, lines: string, opts: Parameters<typeof agentConfig>[3] = {}): string {
  const cfg = agentConfig(fx.tmp.dir, url, '', opts);
  writeFileSync(cfg, readFileSync(cfg, 'utf8').replace(/^subscription_key_file = .*$/m, lines));
  return cfg;
}

describe('a problem with the key', () => {
  it('says only the type of a subscription key that is not a string, at start and by validate-config', async () => {
    const cfg = inlineKey('http://127.0.0.1:9', 'subscription_key = 123456789');
    for (const cmd of ['validate-config', 'run']) {
      const r = await runCli([cmd, '--config', cfg]);
      expect(r.code).toBe(78);
      expect(r.stderr).toContain(`${cfg}:5: api.subscription_key: expected string, got a number\n`);
      expect(r.stderr + r.stdout).not.toContain('123456789');
    }
  });

  it('shows no password of a URL it refuses', async () => {
    const cfg = agentConfig(fx.tmp.dir, 'http://127.0.0.1:9', '', { api: 'proxy = "socks5://ops:pr0xy-pa55@proxy.example:1080"' });
    const r = await runCli(['validate-config', '--config', cfg]);
    expect(r.code).toBe(78);
    expect(r.stderr).toContain('api.proxy: expected "direct" or an http:// or https:// proxy URL, got "socks5://ops:***@proxy.example:1080"');
    expect(r.stderr).not.toContain('pr0xy-pa55');
  });

  it('refuses a key file holding bytes a header cannot carry, naming the field and the file, not the key', async () => {
    const cfg = agentConfig(fx.tmp.dir, 'http://127.0.0.1:9');
    const key = join(fx.tmp.dir, 'key');
    writeFileSync(key, Buffer.from('K\xffEY\x01SECRET\n', 'latin1'));
    for (const cmd of ['validate-config', 'run']) {
      const r = await runCli([cmd, '--config', cfg]);
      expect(r.code).toBe(78);
      expect(r.stderr).toContain(`api.subscription_key_file: ${key} holds a character an HTTP header cannot carry (a control character or non-ASCII); expected only the key's printable ASCII characters\n`);
      expect(r.stderr + r.stdout).not.toContain('SECRET');
    }
  });

  it('refuses an inline key with a line break or a control character in it, not showing it', async () => {
    const cfg = inlineKey('http://127.0.0.1:9', 'subscription_key = "TOP\\nSECRET"');
    const r = await runCli(['validate-config', '--config', cfg]);
    expect(r.code).toBe(78);
    expect(r.stderr).toContain('api.subscription_key: holds more than one word; expected only the key\n');
    expect(r.stderr).not.toContain('SECRET');
    const control = inlineKey('http://127.0.0.1:9', 'subscription_key = "TOP\\u0007SECRET"');
    const c = await runCli(['validate-config', '--config', control]);
    expect(c.code).toBe(78);
    expect(c.stderr).toContain("api.subscription_key: holds a character an HTTP header cannot carry (a control character or non-ASCII); expected only the key's printable ASCII characters\n");
    expect(c.stderr).not.toContain('SECRET');
  });

  it('refuses a reload to such a key, or to a config that would show the key', async () => {
    const { url } = await fx.sandbox.start();
    const cfg = agentConfig(fx.tmp.dir, url);
    const good = readFileSync(cfg, 'utf8');
    const d = daemon(cfg);
    await d.started('the start');

    writeFileSync(join(fx.tmp.dir, 'key'), Buffer.from('K\xffEY\x01SECRET\n', 'latin1'));
    d.child.kill('SIGHUP');
    await waitFor(() => d.output().includes('new configuration refused'), 5000, 'the first refusal');
    expect(d.output()).toContain('api.subscription_key_file');
    expect(d.output()).not.toContain('configuration reloaded');

    writeFileSync(join(fx.tmp.dir, 'key'), 'test-key-0123456789abcdef\n');
    writeFileSync(cfg, good.replace('[api]\n', '[api]\nsubscription_key = 987654321\n'));
    d.child.kill('SIGHUP');
    await waitFor(() => d.output().split('new configuration refused').length === 3, 5000, 'the second refusal');
    expect(d.output()).toContain('api.subscription_key: expected string, got a number');
    expect(d.output()).not.toContain('987654321');
    expect(d.output()).not.toContain('SECRET');
  }, 30_000);
});

describe('a key the service refuses', () => {
  it('is blamed on where the key came from: an inline key is not api.subscription_key_file', async () => {
    const { url } = await fx.sandbox.start();
    // Something to send, at once.
    const store = Store.open(join(fx.tmp.dir, 'buffer.db'));
    store.startLoad({ loadNumber: 'L1', resourceId: 'T1', resourceType: 'Truck', stops: [], nowMs: Date.now() - 60_000 });
    store.insertReadings([{ resourceId: 'T1', timeMs: Date.now() - 30_000, lat: 41.8, lon: -87.6 }]);
    store.close();
    const cfg = inlineKey(url, 'subscription_key = "revoked-key-0000"', { traces: '* * * * * *', sampling: 0 });
    daemon(cfg);
    const status = await waitFor(
      async () => {
        const r = await runCli(['status', '--config', cfg]);
        return r.stdout.includes('PAUSED') ? r.stdout : undefined;
      },
      15_000,
      'status showing the pause',
    );
    expect(status).toMatch(/PAUSED:\s+service refuses our credentials or address \(HTTP 401\); data is kept\. Fix the key \(from api\.subscription_key \(inline\)\)/);
    expect(status).not.toContain('subscription_key_file');
    expect(status).not.toContain('revoked-key-0000');
  }, 30_000);
});
