/**
 * Whether the system clock is synchronised, as the system itself knows it. A device without a
 * battery-backed clock boots with the time of its last shutdown (or 1970) and keeps it until
 * a time daemon sets it, which on a truck in a dead zone can take hours; until then its stamps
 * are wrong and a GNSS fix's own time is the better clock (src/gnss-clock.ts).
 *
 * Asked in order, first answer wins:
 * 1. `/run/systemd/timesync/synchronized`: systemd-timesyncd creates it once it has set the
 *    clock (read with a stat, no process);
 * 2. `timedatectl show -p NTPSynchronized --value`: the kernel's own flag (adjtimex, clear of
 *    STA_UNSYNC), which chrony, ntpd and timesyncd all set once they discipline the clock;
 * 3. neither answers (no systemd, no bus: a container, a minimal image): unknown, which the
 *    agent treats as not synchronised, the side that keeps good GNSS fixes.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';

export const TIMESYNCD_FLAG = '/run/systemd/timesync/synchronized';

export interface SyncAnswer {
  /** undefined: nothing could tell. */
  synchronised: boolean | undefined;
  /** Where the answer came from, for `status` and the log. */
  from: string;
}

export interface SyncProbe {
  flagFile?: string;
  /** The command asked after the flag file: argv (tests replace it). */
  timedatectl?: string[];
  timeoutMs?: number;
}

/** Ask the system once (see the order above). */
export function probeClockSync(probe: SyncProbe = {}): Promise<SyncAnswer> {
  const flag = probe.flagFile ?? TIMESYNCD_FLAG;
  if (existsSync(flag)) return Promise.resolve({ synchronised: true, from: flag });
  const [cmd, ...args] = probe.timedatectl ?? ['timedatectl', 'show', '--property=NTPSynchronized', '--value'];
  return new Promise((resolve) => {
    execFile(cmd!, args, { timeout: probe.timeoutMs ?? 3000, env: { ...process.env, LC_ALL: 'C' } }, (err, stdout) => {
      const v = String(stdout).trim();
      if (!err && (v === 'yes' || v === 'no')) resolve({ synchronised: v === 'yes', from: 'the kernel (timedatectl)' });
      else resolve({ synchronised: undefined, from: `unknown: no ${flag} and timedatectl ${err ? `failed (${firstLine(err.message)})` : `said ${JSON.stringify(v)}`}` });
    });
  });
}

function firstLine(s: string): string {
  return (
    s
      .split('\n')
      .find((l) => l.trim() && !l.startsWith('Command failed'))
      ?.trim() ?? s.split('\n')[0]!
  );
}

/** `clock.synchronised` as an answer: `yes`/`no` are the config's word, `auto` asks the system. */
export function clockSyncOf(setting: 'auto' | 'yes' | 'no', probe?: SyncProbe): Promise<SyncAnswer> {
  if (setting === 'auto') return probeClockSync(probe);
  return Promise.resolve({ synchronised: setting === 'yes', from: `clock.synchronised = "${setting}"` });
}
