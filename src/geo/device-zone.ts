/**
 * The device's own zone, and where it came from: `TZ`, else the `/etc/localtime` link, else
 * `/etc/timezone`, each only if its zoneinfo file is there; else as `Intl` resolves it (which
 * maps ICU's data). Events are written in the zone at their position; the device's zone is
 * for the trace schedule and for a milestone recorded now with no place and no fix at all.
 *
 * A `TZ` that names nothing (`America/Chicgo`) is a mistake, not a choice: the C library
 * and Node quietly run such a process in UTC, six hours off in Chicago. It is reported as a
 * configuration problem (`problem`, exit 78 where a config is loaded), never taken as UTC
 * without a word.
 */
import { readFileSync, readlinkSync } from 'node:fs';
import { registerZone } from './timezone.js';
import { loadZone, parseTzif, posixZone, type ZoneRules, zoneinfoDir } from './tzif.js';

export interface DeviceZone {
  /** An IANA name, or the `TZ` text of a POSIX rule or a TZif file path. */
  zone: string;
  /** `TZ`, `/etc/localtime`, `/etc/timezone`, or Node's default when none names a zone. */
  from: string;
  /** Why `TZ` cannot be used (the zone is then UTC, as the C library takes it). */
  problem?: string;
}

/** Rules named by `TZ` when it is no zone name: a TZif file path, or a POSIX rule. */
function customRules(tz: string): ZoneRules | undefined {
  try {
    return tz.startsWith('/') ? parseTzif(readFileSync(tz)) : posixZone(tz);
  } catch {
    return undefined; // `Mars/Olympus`: neither
  }
}

/** `/usr/share/zoneinfo/America/Chicago` -> `America/Chicago`; undefined for other paths. */
function zoneNameFromPath(path: string): string | undefined {
  return /(?:^|\/)zoneinfo\/(.+)$/.exec(path)?.[1];
}

/** The machine's zone from `TZ` and the files, and where it came from; undefined when none names a readable zone and `TZ` is not set. */
export function deviceZoneFromFiles(env: NodeJS.ProcessEnv = process.env, localtime = '/etc/localtime', timezoneFile = '/etc/timezone', dir?: string): DeviceZone | undefined {
  const known = (name: string | undefined) => (name && loadZone(name, dir) ? name : undefined);
  const tz = env.TZ;
  if (tz !== undefined) {
    // `TZ=:America/Chicago`, `TZ=America/Chicago`, or a file path; empty means UTC.
    const name = tz.startsWith(':') ? tz.slice(1) : tz;
    if (name === '') return { zone: 'UTC', from: 'TZ' };
    const found = known(zoneNameFromPath(name) ?? name);
    if (found) return { zone: found, from: 'TZ' };
    // Not a zone name: a TZif file elsewhere (`/etc/localtime`), or a POSIX rule such as
    // `CST6CDT,M3.2.0,M11.1.0` (BusyBox and OpenWrt systems set TZ so). Registered under
    // that text, which is then the zone's name.
    const rules = customRules(name);
    if (!rules) {
      return {
        zone: 'UTC',
        from: 'TZ',
        problem: `TZ: ${JSON.stringify(tz)} is no zone in ${dir ?? zoneinfoDir()}, no zoneinfo file and no POSIX TZ rule, so this device would run in UTC; set a zone name such as America/Chicago (timedatectl list-timezones), or unset TZ to use /etc/localtime`,
      };
    }
    registerZone(name, rules);
    return { zone: name, from: 'TZ' };
  }
  try {
    const found = known(zoneNameFromPath(readlinkSync(localtime)));
    if (found) return { zone: found, from: localtime };
  } catch {
    // not a link (or not there): try /etc/timezone
  }
  try {
    const found = known(readFileSync(timezoneFile, 'utf8').trim());
    return found ? { zone: found, from: timezoneFile } : undefined;
  } catch {
    return undefined;
  }
}

/** The machine's zone from `TZ` and the files, or undefined when none names a readable zone. */
export function systemZoneFromFiles(env: NodeJS.ProcessEnv = process.env, localtime = '/etc/localtime', timezoneFile = '/etc/timezone', dir?: string): string | undefined {
  const found = deviceZoneFromFiles(env, localtime, timezoneFile, dir);
  return found && !found.problem ? found.zone : undefined;
}

let cache: DeviceZone | undefined;
/** This process's zone and where it came from (read once). */
export function deviceZone(): DeviceZone {
  return (cache ??= deviceZoneFromFiles() ?? {
    zone: Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC',
    from: "Node's default (no TZ, no /etc/localtime link, no /etc/timezone naming a zoneinfo file)",
  });
}

/** The zone of the machine (see `deviceZone`). */
export function systemZone(): string {
  return deviceZone().zone;
}

/** `America/Chicago (from TZ)`: for `validate-config`, `status` and the start log. */
export function describeDeviceZone(z: DeviceZone = deviceZone()): string {
  return `${z.zone} (from ${z.from})`;
}

/** Said at start when the device's zone has no zoneinfo file (the system's tzdata is the fresher one: Alberta on UTC-6 all year, Nov 2026, is not in Node 20's ICU). */
export const STALE_ZONEINFO = "no zoneinfo file for the machine's zone (is tzdata installed?): time zones come from Node's ICU data instead, which may miss recent changes";
