/**
 * The bench's output: the machine it ran on, number formats, and the table of rows.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { availableParallelism, totalmem } from 'node:os';
import { MB } from './options.js';

export const round = (n: number, d = 1) => Math.round(n * 10 ** d) / 10 ** d;

export function machine() {
  const cpu = /^model name\s*:\s*(.+)$/m.exec(readFileSync('/proc/cpuinfo', 'utf8'))?.[1]?.trim() ?? 'unknown';
  let memory = `${round(totalmem() / 1024 ** 3, 1)} GiB`;
  try {
    const free = execFileSync('free', ['-h'], { encoding: 'utf8' });
    const m = /^Mem:\s+(\S+)\s+\S+\s+\S+\s+\S+\s+\S+\s+(\S+)/m.exec(free);
    if (m) memory = `${m[1]} total, ${m[2]} available`;
  } catch {
    // No procps: the total from os will do.
  }
  return { nproc: availableParallelism(), memory, cpu, node: process.version, platform: `${process.platform}-${process.arch}` };
}

export interface Row {
  id: string;
  measure: string;
  value: string;
  reference: string;
  ratio: string;
  target: string;
  /** true PASS, false MISS, null: no target (information). */
  pass: boolean | null;
}

export function table(rows: Row[]): string {
  const head = ['#', 'measure', 'ours', 'reference', 'ratio', 'target', 'result'];
  const cells = rows.map((r) => [r.id, r.measure, r.value, r.reference, r.ratio, r.target, r.pass === null ? 'info' : r.pass ? 'PASS' : 'MISS']);
  const widths = head.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i].length)));
  const line = (c: string[]) => `| ${c.map((x, i) => x.padEnd(widths[i])).join(' | ')} |`;
  return [line(head), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...cells.map(line)].join('\n');
}

export const fmt = (n: number) => Math.round(n).toLocaleString('en-US');
export const mb = (b: number) => `${round(b / MB, 1)} MB`;
export const pct = (x: number) => `${round(x * 100, 0)}%`;
