/**
 * Row 3g: what the driver's page costs an idle agent. Two `run` daemons side by side, the
 * same config but for `[ui] listen` on the second, each with a 1 Hz simulator and one
 * milestone sent; the page is loaded once (every module of it, and its rendering, run) and one
 * client stays on its Server-Sent Events stream through the window, as a phone in the cab
 * would. The figure is the difference of their anonymous memory (RssAnon) at the window's end.
 */
import { get, type IncomingMessage } from 'node:http';
import { join } from 'node:path';
import type { Sandbox } from '../src/sandbox/server.js';
import { type Memory, memoryOf, sleep } from './common.js';
import { daemonFiles, oneMilestone, startDaemon } from './daemon.js';
import { MB, QUICK, SIZES } from './options.js';
import { waitExit } from './processes.js';
import { mb, type Row } from './report.js';

/** The target: at most this much more anonymous memory with the page on and one client. */
export const UI_PAGE_ANON_MAX = 5 * MB;

export interface UiPageRun {
  withPage: Memory;
  without: Memory;
  /** SSE messages the client got during the window. */
  events: number;
}

function fetchPage(port: number, path: string, cookie = ''): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => get({ host: '127.0.0.1', port, path, headers: cookie ? { cookie } : {} }, resolve).on('error', reject));
}

export async function benchUiPage(sandbox: Sandbox, dir: string): Promise<UiPageRun> {
  const plain = daemonFiles(join(dir, 'ui-off'), sandbox.url, 'FULL', 'ui-off');
  const page = daemonFiles(join(dir, 'ui-on'), sandbox.url, 'FULL', 'ui-on', '[ui]\nlisten = "127.0.0.1:0"\n');
  const started = await Promise.all([startDaemon(plain), startDaemon(page)]);
  let stream: IncomingMessage | undefined;
  try {
    await Promise.all([oneMilestone(plain), oneMilestone(page)]);
    const deadline = performance.now() + 30_000;
    let line: string | undefined;
    while (
      !(line = started[1]
        .output()
        .split('\n')
        .find((l) => l.includes('driver page listening')))
    ) {
      if (performance.now() > deadline) throw new Error(`the driver page did not start: ${started[1].output().slice(-2000)}`);
      await sleep(20);
    }
    const port = (JSON.parse(line) as { port: number }).port;
    // A loopback page needs no PIN: its first answer carries the session cookie.
    const first = await fetchPage(port, '/');
    first.resume();
    const cookie = String(first.headers['set-cookie']?.[0] ?? '').split(';')[0];
    stream = await fetchPage(port, '/events', cookie);
    let events = 0;
    stream.on('data', (d: Buffer) => (events += d.toString().split('\ndata: ').length - 1 + (d.toString().startsWith('data: ') ? 1 : 0)));
    await sleep(QUICK ? 1000 : 3000);
    await sleep(SIZES.idleS * 1000);
    const [without, withPage] = started.map((d) => memoryOf(d.child.pid!)!);
    return { withPage, without, events };
  } finally {
    stream?.destroy();
    for (const d of started) if (d.child.exitCode === null) d.child.kill('SIGTERM');
    for (const d of started) await waitExit(d.child, 25_000);
  }
}

export function uiPageRow(r: UiPageRun): Row {
  const delta = r.withPage.anon - r.without.anon;
  return {
    id: '3g',
    measure: `\`run\` idle ${SIZES.idleS} s with the driver's page on and one client on its SSE stream (${r.events} message${r.events === 1 ? '' : 's'}), vs the same daemon without it; anon`,
    value: `${mb(r.withPage.anon)} vs ${mb(r.without.anon)}`,
    reference: '',
    ratio: `${delta >= 0 ? '+' : ''}${mb(delta)}`,
    target: `<= +${UI_PAGE_ANON_MAX / MB} MB`,
    pass: delta <= UI_PAGE_ANON_MAX,
  };
}
