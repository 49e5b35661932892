import { readFileSync } from 'node:fs';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ApiClient } from '../src/api/client.js';
import { Sandbox } from '../src/sandbox/server.js';
import { TEST_KEY, TEST_SCAC, tempDir } from './helpers.js';
import { makePki, type Pki } from './pki.js';

// What a push costs on the wire, against the real sandbox over TLS on port 0.
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

let pki: Pki;
const tmp = tempDir();
let sandbox: Sandbox | undefined;
let client: ApiClient | undefined;

beforeAll(() => {
  pki = makePki(tmp.dir);
});
afterAll(() => tmp.cleanup());
afterEach(async () => {
  await client?.close();
  client = undefined;
  await sandbox?.stop();
  sandbox = undefined;
});

const trace = (i: number) => ({
  loadNumber: 'L1',
  traces: [
    {
      time: { dateTime: '2025-03-01T08:00:00-06:00', timeZoneCode: 'CST', timeZoneOffset: 'UTC-6' },
      resourceId: 'TRUCK-1',
      resourceType: 'Truck',
      coordinate: { latitude: 41.8 + i / 1000, longitude: -87.6 },
      references: [{ name: 'traceId', value: `dev-${i}` }],
    },
  ],
});

async function start(opts: Partial<ConstructorParameters<typeof Sandbox>[0]> = {}): Promise<{ sandbox: Sandbox; client: ApiClient }> {
  sandbox = new Sandbox({ key: TEST_KEY, scac: TEST_SCAC, tls: { cert: pki.cert, key: pki.key }, idleTimeoutMs: 60_000, ...opts });
  const { url } = await sandbox.start();
  client = new ApiClient({
    baseUrl: url,
    milestonePath: '/rcsc/events/v1/loads/milestone-requests',
    tracePath: '/rcsc/events/v1/loads/trace-requests',
    scac: TEST_SCAC,
    subscriptionKey: TEST_KEY,
    timeoutMs: 5000,
    ca: readFileSync(pki.caFile, 'utf8'),
  });
  return { sandbox, client };
}

describe('TLS sessions across pushes', () => {
  it('resumes the session on the next push after the service closed the idle connection, a collection between', async () => {
    const { sandbox, client } = await start();
    for (let push = 0; push < 3; push++) {
      const out = await client.postTraces(trace(push), `key-${push}`);
      expect(out).toMatchObject({ kind: 'response', status: 200 });
      // 15 minutes later: the service's idle timeout closed the connection, the daemon collected garbage.
      sandbox.closeIdle();
      await new Promise((r) => setTimeout(r, 50));
      gc();
    }
    expect(sandbox.stats.wire.handshakes).toEqual({ full: 1, resumed: 2 });
  });
});
