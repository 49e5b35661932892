/**
 * Rows 3a to 3f, memory as an operator reads it: every row gives RSS, its anonymous part
 * (RssAnon: what the agent itself costs) and its file-backed part (RssFile: pages of the node
 * binary and libraries, shared and reclaimable), from /proc/PID/status, of processes run with
 * the unit's NODE_OPTIONS and the V8 flags `run` sets; 3f is the cgroup's figure that
 * `systemctl status` shows. The agent has made one request (a milestone) before any idle
 * figure is read: undici compiles its HTTP parser then.
 */
import type { CgroupView, DaemonRun } from './daemon.js';
import type { Memory } from './common.js';
import type { DrainResult } from './drain.js';
import { MB, SIZES } from './options.js';
import { mb, round, type Row } from './report.js';

/** Targets of the brief: idle (3a, 3e) both of these; the peak during the drain (3b). */
export const IDLE_ANON_MAX = 28 * MB;
export const IDLE_RSS_MAX = 80 * MB;
export const PEAK_RSS_MAX = 120 * MB;

/** `RSS 62.3 MB (anon 20.1 + file 42.2)`. */
export const split = (m: Memory) => `RSS ${mb(m.rss)} (anon ${mb(m.anon)} + file ${mb(m.file)})`;
const idleOk = (m: Memory) => m.anon <= IDLE_ANON_MAX && m.rss <= IDLE_RSS_MAX;
const idleTarget = `anon <= ${IDLE_ANON_MAX / MB} MB, RSS <= ${IDLE_RSS_MAX / MB} MB`;

export function memoryRows(r: { large: DrainResult; small: DrainResult; week: DrainResult; daemon: DaemonRun; cgroup: CgroupView; label: (n: number) => string }): Row[] {
  const { large, small, week, daemon, cgroup, label } = r;
  const growth = large.peak.rss - small.peak.rss;
  const row = (id: string, measure: string, value: string, target = '', pass: boolean | null = null, ratio = ''): Row => ({ id, measure, value, reference: '', ratio, target, pass });
  const kernel = cgroup.usage - cgroup.anon - cgroup.file;
  const cgroupSplit = cgroup.kind.startsWith('cgroup')
    ? `${mb(cgroup.usage)} (anon ${mb(cgroup.anon)} + page cache ${mb(cgroup.file)}${cgroup.mapped === undefined ? '' : `, ${mb(cgroup.mapped)} mapped,`} + kernel ${mb(kernel)})`
    : `${mb(cgroup.usage)} (anon ${mb(cgroup.anon)} + file-backed and cached ${mb(cgroup.file)})`;
  return [
    row(
      '3a',
      `idle ${round(SIZES.idleSettleMs / 1000, 0)} s after start, ${label(large.readings)} backlog, one milestone sent (Agent in the worker; RSS ${mb(large.earlyRss)} at ${round(SIZES.settleMs / 1000, 1)} s)`,
      split(large.idle),
      idleTarget,
      idleOk(large.idle),
    ),
    row(
      '3b',
      `peak during the ${label(large.readings)} drain (sampled every 50 ms from start; VmHWM ${mb(large.hwm)}; anon peak ${mb(large.peakAnon)})`,
      split(large.peak),
      `RSS <= ${PEAK_RSS_MAX / MB} MB`,
      large.peak.rss <= PEAK_RSS_MAX,
    ),
    row(
      '3c',
      `RSS peak ${label(small.readings)} vs ${label(large.readings)} backlog (anon ${mb(small.peak.anon)} vs ${mb(large.peak.anon)}; 7 days: ${mb(week.peak.rss)})`,
      `${mb(small.peak.rss)} vs ${mb(large.peak.rss)}`,
      'flat (<= +10% +5 MB)',
      large.peak.rss <= small.peak.rss * 1.1 + 5 * MB,
      `${growth >= 0 ? '+' : ''}${mb(growth)}`,
    ),
    row('3d', `after the ${label(large.readings)} drain and purge`, split(large.after)),
    row('3e', `\`run\` after ${SIZES.idleS} s at 1 Hz, one milestone sent (VmHWM ${mb(daemon.memory.hwm)})`, split(daemon.memory), idleTarget, idleOk(daemon.memory)),
    row(
      '3f',
      `the cgroup's view of 3e, \`systemctl status\` "Memory:" (${cgroup.kind}${cgroup.peak ? `; peak ${mb(cgroup.peak)}` : ''}${(cgroup.nodeCachedBytes ?? 0) > MB ? `; ${mb(cgroup.nodeCachedBytes ?? 0)} of node was cached before: not counted` : ''})`,
      cgroupSplit,
    ),
  ];
}

/** `<name>MB`, `<name>AnonMB`, `<name>FileMB` of a Memory. */
const figuresOf = (name: string, m: Memory) => ({ [`${name}MB`]: m.rss / MB, [`${name}AnonMB`]: m.anon / MB, [`${name}FileMB`]: m.file / MB });

/** The memory figures of the JSON report, MB. */
export function memoryFigures(r: { large: DrainResult; small: DrainResult; week: DrainResult; daemon: DaemonRun; cgroup: CgroupView }) {
  const { large, small, week, daemon, cgroup } = r;
  return {
    ...figuresOf('rssIdle', large.idle),
    rssIdleEarlyMB: large.earlyRss / MB,
    // At the sample with the highest RSS; the highest anonymous memory of any sample beside it.
    ...figuresOf('rssPeak', large.peak),
    rssAnonMaxMB: large.peakAnon / MB,
    rssPeakHwmMB: large.hwm / MB,
    ...figuresOf('rssAfter', large.after),
    ...figuresOf('rssPeakSmall', small.peak),
    smallReadings: small.readings,
    rssPeakWeekMB: week.peak.rss / MB,
    ...figuresOf('rssDaemon', daemon.memory),
    rssDaemonHwmMB: daemon.memory.hwm / MB,
    cgroupUsageMB: cgroup.usage / MB,
    cgroupAnonMB: cgroup.anon / MB,
    cgroupFileMB: cgroup.file / MB,
    ...(cgroup.mapped ? { cgroupMappedMB: cgroup.mapped / MB } : {}),
    ...(cgroup.peak ? { cgroupPeakMB: cgroup.peak / MB } : {}),
  };
}
