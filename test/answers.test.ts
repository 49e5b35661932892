/**
 * What the service answers is kept: the real daemon against a small receiver on port 0 that
 * answers each milestone as told and logs what it got. The failures these guard against:
 * correlation ids thrown away (nobody could match a record with the service's logs), a dead
 * letter's answer cut to 310 characters without its headers (the field the service named was
 * past the cut), and a 409 for a record the service already had parked as a dead letter.
 * A 409 means "already there" only for a repeat: to a first send it is a refusal.
 */
import { once } from 'node:events';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { agentConfig, runCli, startDaemon, waitFor, type Daemon, tempFixture } from './helpers.js';

interface Answer {
  status: number;
  headers?: Record<string, string>;
  body?: string;
}

interface Got {
  path: string;
  headers: IncomingHttpHeaders;
  body: { eventCode?: string };
  status: number;
}

/**
 * Answers each milestone by its eventCode (200 to anything else; a list: one answer per
 * request, the last one again after that), and logs every request.
 */
async function receiver(answers: Record<string, Answer | Answer[]>): Promise<{ url: string; got: Got[]; close: () => Promise<void> }> {
  const got: Got[] = [];
  const server: Server = createServer((req, res) => {
    let text = '';
    req.on('data', (d: Buffer) => (text += d.toString()));
    req.on('end', () => {
      const body = JSON.parse(text || '{}') as Got['body'];
      const code = body.eventCode ?? '';
      const seen = got.filter((g) => g.body.eventCode === code).length;
      const listed = answers[code];
      const a = (Array.isArray(listed) ? listed[Math.min(seen, listed.length - 1)] : listed) ?? { status: 200, body: '{}' };
      got.push({ path: req.url ?? '', headers: req.headers, body, status: a.status });
      res.writeHead(a.status, { 'content-type': 'application/json', ...a.headers });
      res.end(a.body ?? '');
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    got,
    close: () => {
      server.closeAllConnections();
      return new Promise((r) => server.close(() => r()));
    },
  };
}

interface ListedMilestone {
  id: number;
  code: string;
  state: string;
  attempts: number;
  lastStatus: number | null;
  lastAnswer: string | null;
  correlationId: string | null;
}

const tmp = tempFixture();
let daemon: Daemon | undefined;
let server: Awaited<ReturnType<typeof receiver>> | undefined;
afterEach(async () => {
  await daemon?.stop('SIGTERM');
  daemon = undefined;
  await server?.close();
  server = undefined;
});

/** 100 KB of answer that names the refused field only near its end. */
const BIG = JSON.stringify({ error: 'validation failed', detail: 'x'.repeat(100_000), field: 'time.timeZoneOffset' });

async function record(cfg: string, codes: string[]): Promise<void> {
  for (const code of codes) {
    const r = await runCli(['milestone', '--load', 'L1', '--code', code, '--city', 'Chicago', '--state', 'IL', '--config', cfg]);
    expect(r.code, r.stderr).toBe(0);
  }
}

async function listed(cfg: string): Promise<ListedMilestone[]> {
  const r = await runCli(['milestone', 'list', '--load', 'L1', '--json', '--config', cfg]);
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as ListedMilestone[];
}

describe("the service's answers are kept", () => {
  it('2xx: correlation id from the body or a header; 400: the whole answer up to 64 KB with its headers; 409 to a repeat: delivered, a duplicate', async () => {
    server = await receiver({
      X3: { status: 200, body: JSON.stringify({ correlationId: 'corr-body-1' }), headers: { 'x-correlation-id': 'the-body-wins' } },
      AF: { status: 201, headers: { 'x-correlation-id': 'corr-header-2' } },
      X1: { status: 400, body: BIG, headers: { 'x-request-id': 'req-400', 'x-error-code': 'E_FIELD' } },
      // The first answer is lost in a 503; the repeat finds the service has it.
      D1: [{ status: 503 }, { status: 409, body: '{"error":"already received"}' }],
    });
    const cfg = agentConfig(tmp.dir, server.url, '[health]\nlisten = "127.0.0.1:0"\n');
    expect((await runCli(['load', 'start', 'L1', '--resource', 'T1', '--config', cfg])).code).toBe(0);
    daemon = startDaemon(['--config', cfg]);
    await record(cfg, ['X3', 'AF', 'X1', 'D1']);
    await waitFor(() => server!.got.length === 5, 10_000, 'four milestones at the receiver, one twice');
    const rows = await waitFor(
      async () => {
        const l = await listed(cfg);
        return l.every((m) => m.state !== 'pending') && l;
      },
      10_000,
      'no milestone pending',
    );

    expect(rows.map(({ code, state, attempts, lastStatus, correlationId }) => ({ code, state, attempts, lastStatus, correlationId }))).toEqual([
      { code: 'X3', state: 'sent', attempts: 1, lastStatus: 200, correlationId: 'corr-body-1' },
      { code: 'AF', state: 'sent', attempts: 1, lastStatus: 201, correlationId: 'corr-header-2' },
      { code: 'X1', state: 'dead-letter', attempts: 1, lastStatus: 400, correlationId: null },
      { code: 'D1', state: 'sent', attempts: 2, lastStatus: 409, correlationId: null },
    ]);
    expect(rows[3].lastAnswer).toBe('HTTP 409: the service already had it');
    const text = (await runCli(['milestone', 'list', '--load', 'L1', '--config', cfg])).stdout.split('\n');
    expect(text[0]).toMatch(/^1\tX3\tstop -\t\S+\tmanual\tsent\t1 attempt\(s\)\tHTTP 200\tcorrelation corr-body-1$/);
    expect(text[2]).toMatch(/^3\tX1\tstop -\t\S+\tmanual\tdead-letter\t1 attempt\(s\)\tHTTP 400 \{"error":"validation failed"/);

    const dead = JSON.parse((await runCli(['dead-letter', 'list', '--json', '--config', cfg])).stdout) as Array<{ kind: string; status: number; response: string; headers: Record<string, string> }>;
    expect(dead).toHaveLength(1);
    expect(dead[0]).toMatchObject({ kind: 'milestone', status: 400 });
    expect(dead[0].response).toBe(BIG.slice(0, 65_536));
    expect(dead[0].headers).toMatchObject({ 'x-request-id': 'req-400', 'x-error-code': 'E_FIELD', 'content-type': 'application/json' });

    // The duplicate is counted where an operator looks: status, metrics and the log.
    const status = await waitFor(
      async () => {
        const s = JSON.parse((await runCli(['status', '--json', '--config', cfg])).stdout) as { delivery: { duplicates: number; deadLettered: { milestones: number }; sent: { milestones: number } } | null };
        return s.delivery?.sent.milestones === 3 && s;
      },
      10_000,
      'status with the delivered milestones',
    );
    expect(status.delivery).toMatchObject({ duplicates: 1, deadLettered: { milestones: 1 } });
    const port = Number(/"health":(\d+)/.exec(daemon.output())![1]);
    const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    expect(metrics).toMatch(/^telematics_duplicates_total 1$/m);
    expect(metrics).toMatch(/^telematics_dead_letters 1$/m);
    expect(daemon.output()).toContain('milestone already at the service (HTTP 409): counted as delivered, a duplicate');
  });

  it('with delivery.conflict_is_delivered = false a 409 is a dead letter; correlation ids are found under configured names', async () => {
    server = await receiver({
      X3: { status: 200, body: JSON.stringify({ requestRef: 'ref-1', correlationId: 'not-this-one' }) },
      AF: { status: 200, headers: { 'x-req-id': 'hdr-2', 'x-correlation-id': 'not-this-one' } },
      D1: { status: 409, body: '{"error":"conflict"}', headers: { 'x-req-id': 'hdr-409' } },
    });
    const cfg = agentConfig(tmp.dir, server.url, 'conflict_is_delivered = false\n', { api: 'correlation_id_field = "requestRef"\ncorrelation_id_header = "X-Req-Id"' });
    expect((await runCli(['load', 'start', 'L1', '--resource', 'T1', '--config', cfg])).code).toBe(0);
    daemon = startDaemon(['--config', cfg]);
    await record(cfg, ['X3', 'AF', 'D1']);
    const rows = await waitFor(
      async () => {
        const l = await listed(cfg);
        return l.length === 3 && l.every((m) => m.state !== 'pending') && l;
      },
      10_000,
      'no milestone pending',
    );
    expect(rows.map((m) => [m.code, m.state, m.lastStatus, m.correlationId])).toEqual([
      ['X3', 'sent', 200, 'ref-1'],
      ['AF', 'sent', 200, 'hdr-2'],
      ['D1', 'dead-letter', 409, null],
    ]);
    const dead = JSON.parse((await runCli(['dead-letter', 'list', '--json', '--config', cfg])).stdout) as Array<{ status: number; response: string; headers: Record<string, string> }>;
    expect(dead).toMatchObject([{ status: 409, response: '{"error":"conflict"}', headers: { 'x-req-id': 'hdr-409' } }]);
  });

  it('a 409 to a milestone that never went out before is a refusal: parked with its answer, not counted as delivered', async () => {
    server = await receiver({ X3: { status: 409, body: '{"error":"stop 1 already has an arrival"}' } });
    const cfg = agentConfig(tmp.dir, server.url);
    expect((await runCli(['load', 'start', 'L1', '--resource', 'T1', '--config', cfg])).code).toBe(0);
    daemon = startDaemon(['--config', cfg]);
    await record(cfg, ['X3', 'AF']);
    const rows = await waitFor(
      async () => {
        const l = await listed(cfg);
        return l.length === 2 && l.every((m) => m.state !== 'pending') && l;
      },
      10_000,
      'no milestone pending',
    );
    expect(rows.map((m) => [m.code, m.state, m.attempts, m.lastStatus])).toEqual([
      ['X3', 'dead-letter', 1, 409],
      ['AF', 'sent', 1, 200],
    ]);
    expect(server.got.map((g) => g.body.eventCode)).toEqual(['X3', 'AF']);
    const dead = JSON.parse((await runCli(['dead-letter', 'list', '--json', '--config', cfg])).stdout) as Array<{ status: number; response: string }>;
    expect(dead).toMatchObject([{ status: 409, response: '{"error":"stop 1 already has an arrival"}' }]);
    expect(daemon.output()).not.toContain('counted as delivered');
  });
});
