/**
 * The subscription key stays with the agent: an exec adapter does not inherit it (nor the
 * systemd credentials directory that holds it), the API client shows it to nothing that
 * serialises or inspects it, and a key file other users can read is warned about.
 */
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { inspect } from 'node:util';
import { afterEach, describe, expect, it } from 'vitest';
import { ApiClient } from '../src/api/client.js';
import { Sandbox } from '../src/sandbox/server.js';
import { TEST_KEY, TEST_SCAC, agentConfig, runCli, startDaemon, waitFor, writeFile, type Daemon, tempFixture } from './helpers.js';

const tmp = tempFixture();
let daemons: Daemon[] = [];
afterEach(async () => {
  for (const d of daemons) await d.stop('SIGKILL');
  daemons = [];
});

function daemon(cfg: string, env: NodeJS.ProcessEnv = {}): Daemon {
  const d = startDaemon(['--config', cfg], env);
  daemons.push(d);
  return d;
}

describe('the exec source', () => {
  it('does not hand the key, or the credentials directory that holds it, to the adapter', async () => {
    const envKey = 'env-key-5f1c0a7d9e';
    const credKey = 'credential-key-82b4e6f0c3';
    const creds = join(tmp.dir, 'credentials');
    mkdirSync(creds);
    writeFile(creds, 'subscription-key', `${credKey}\n`, 0o600);
    const dump = join(tmp.dir, 'adapter-saw.txt');
    // An adapter that looks for secrets: its environment, and the credentials directory.
    const adapter = writeFile(
      tmp.dir,
      'adapter.sh',
      `#!/bin/sh
{
  env
  echo "--- CREDENTIALS_DIRECTORY=[$CREDENTIALS_DIRECTORY]"
  ls -la "$CREDENTIALS_DIRECTORY" 2>&1
  cat "$CREDENTIALS_DIRECTORY/subscription-key" 2>&1
} > ${dump}.tmp
mv ${dump}.tmp ${dump}
`,
      0o755,
    );
    const base = agentConfig(tmp.dir, 'http://127.0.0.1:9', `[[sources]]\ntype = "exec"\nname = "adapter"\ncommand = ["${adapter}"]\nrestart_initial_s = 5\nrestart_max_s = 5\n`);
    // No key file: the agent itself takes the key from its environment.
    writeFileSync(base, readFileSync(base, 'utf8').replace(/^subscription_key_file = .*\n/m, ''));
    const d = daemon(base, { CREDENTIALS_DIRECTORY: creds, TELEMATICS_AGENT_SUBSCRIPTION_KEY: envKey });
    await d.started('the daemon');
    expect(d.output()).toContain('"keyOrigin":"$TELEMATICS_AGENT_SUBSCRIPTION_KEY"');
    await waitFor(() => existsSync(dump), 15_000, 'the adapter to run');
    expect(await d.stop('SIGTERM')).toEqual({ code: 0, signal: null });

    const saw = readFileSync(dump, 'utf8');
    const names = saw.split('\n').map((l) => l.split('=')[0]);
    expect(names).toContain('PATH');
    expect(names).not.toContain('TELEMATICS_AGENT_SUBSCRIPTION_KEY');
    expect(names).not.toContain('CREDENTIALS_DIRECTORY');
    expect(saw).toContain('--- CREDENTIALS_DIRECTORY=[]');
    expect(saw).not.toContain(creds);
    expect(saw).not.toContain(envKey);
    expect(saw).not.toContain(credKey);
    expect(d.output()).not.toContain(envKey);
  }, 30_000);
});

describe('a key file other users can read', () => {
  it('is warned about by validate-config and by the daemon, naming the file and the fix; 0600 is not', async () => {
    const cfg = agentConfig(tmp.dir, 'http://127.0.0.1:9');
    const keyFile = join(tmp.dir, 'key');
    const warning = `subscription key: ${keyFile} is readable by every user on this device (mode 0644); make it 0640 root:telematics-agent or 0600: chmod o-rwx ${keyFile}`;

    chmodSync(keyFile, 0o644);
    const loose = await runCli(['validate-config', '--config', cfg]);
    expect(loose.code).toBe(0);
    expect(loose.stderr).toBe(`warning: ${warning}\n`);
    const d = daemon(cfg);
    await d.started('the daemon');
    const line = d
      .output()
      .split('\n')
      .find((l) => l.includes('readable by every user'));
    expect(line).toBeDefined();
    expect(JSON.parse(line!)).toMatchObject({ level: 40, msg: warning });
    // Its log with it if it does not stop: it once needed SIGKILL in a full run on a busy machine.
    expect(await d.stop('SIGTERM'), d.output().slice(-4000)).toEqual({ code: 0, signal: null });

    chmodSync(keyFile, 0o600);
    const tight = await runCli(['validate-config', '--config', cfg]);
    expect(tight.code).toBe(0);
    expect(tight.stderr).toBe('');
    const d2 = daemon(cfg);
    await d2.started('the daemon');
    expect(await d2.stop('SIGTERM')).toEqual({ code: 0, signal: null });
    expect(d2.output()).not.toContain('readable by every user');
    expect(d.output() + d2.output()).not.toContain(TEST_KEY);
  }, 40_000);
});

describe('the API client', () => {
  it('sends the key but shows it to nothing that serialises or inspects it', async () => {
    const sandbox = new Sandbox({ key: TEST_KEY, scac: TEST_SCAC });
    const { url } = await sandbox.start();
    const client = new ApiClient({
      baseUrl: url,
      milestonePath: '/rcsc/events/v1/loads/milestone-requests',
      tracePath: '/rcsc/events/v1/loads/trace-requests',
      scac: TEST_SCAC,
      subscriptionKey: TEST_KEY,
      timeoutMs: 5000,
    });
    try {
      expect('headers' in client).toBe(false);
      expect(JSON.stringify(client)).not.toContain(TEST_KEY);
      expect(inspect(client, { showHidden: true, depth: 10 })).not.toContain(TEST_KEY);
      const values = (o: object): unknown[] => Object.values(o).flatMap((v) => (v && typeof v === 'object' ? values(v as object) : [v]));
      expect(values(client)).not.toContain(TEST_KEY);
      // Still sent: the sandbox checks it.
      const body = {
        eventCode: 'X3',
        reasonCode: 'NS',
        loadNumber: 'L1',
        time: { dateTime: '2026-01-15T08:05:03.000-06:00', timeZoneCode: 'CST', timeZoneOffset: 'UTC-6' },
      };
      const sent = await client.postMilestone(body, 'idem-1');
      expect(sent).toMatchObject({ kind: 'response', status: 200 });
      expect(sandbox.stats.unauthorized).toBe(0);
    } finally {
      await client.close();
      await sandbox.stop();
    }
  });
});
