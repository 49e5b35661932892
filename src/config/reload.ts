/**
 * What a reload (SIGHUP) changes: every setting that differs between the running config and
 * the new file, split into those applied at once and those the schema marks as needing a
 * restart (which keep their running value until then).
 */
import { restartSettings, type Config } from './schema.js';

/** What a reload did: settings applied, and settings that wait for a restart. */
export interface ReloadResult {
  applied: string[];
  needsRestart: string[];
}

/** Dotted paths of every leaf that differs between two configs (arrays and records compare whole). */
export function changedSettings(a: unknown, b: unknown, prefix = ''): string[] {
  const isTable = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
  const table = (v: unknown) => (isTable(v) ? v : v === undefined ? {} : undefined);
  const ta = table(a);
  const tb = table(b);
  if (ta && tb && (isTable(a) || isTable(b)) && prefix.split('.').length < 3 && !['api.extra_fields', 'sources'].includes(prefix)) {
    const keys = [...new Set([...Object.keys(ta), ...Object.keys(tb)])].sort();
    return keys.flatMap((k) => changedSettings(ta[k], tb[k], prefix ? `${prefix}.${k}` : k));
  }
  return JSON.stringify(a) === JSON.stringify(b) ? [] : [prefix];
}

/**
 * The config a reload runs with: the new file, except that every changed setting marked as
 * needing a restart keeps its running value; and which changed settings are which.
 */
export function planReload(running: Config, runningDeviceId: string, next: Config, nextDeviceId: string): ReloadResult & { changed: string[]; config: Config } {
  const changed = changedSettings({ ...running, device_id: runningDeviceId }, { ...next, device_id: nextDeviceId });
  const restartKeys = restartSettings();
  const waits = (path: string) => restartKeys.some((k) => path === k || path.startsWith(`${k}.`));
  const config = structuredClone(next);
  const keep = (from: Record<string, unknown>, to: Record<string, unknown>, path: string[]): void => {
    const [head, ...rest] = path;
    if (rest.length === 0) to[head] = structuredClone(from[head]);
    else keep(from[head] as Record<string, unknown>, to[head] as Record<string, unknown>, rest);
  };
  for (const k of restartKeys) keep(running as unknown as Record<string, unknown>, config as unknown as Record<string, unknown>, k.split('.'));
  return { changed, applied: changed.filter((p) => !waits(p)), needsRestart: changed.filter(waits), config };
}
