/**
 * Drop-ins: `agent.d/*.toml` beside `agent.toml` (`<name>.d/` beside `<name>.toml`), read in
 * name order and merged over it, so that Ansible or a fleet tool can template one small file
 * per truck (its device_id, its sources) and leave the packaged `agent.toml` alone. Tables are
 * merged key by key (a drop-in's `[api] scac` replaces that key and keeps the others),
 * `[[sources]]` tables are appended, any other value is replaced. Each file is parsed on its
 * own, so a problem can name the file and line it came from (toml-lines.ts).
 */
import { readdirSync } from 'node:fs';
import { basename, dirname, extname, join } from 'node:path';
import { lineOf, tomlLines, type Lines } from './toml-lines.js';

/** Arrays of tables that drop-ins add to rather than replace. */
const APPENDED = ['sources'];

/** The drop-in directory of a config file: `agent.d` beside `agent.toml`. */
export function dropInDir(file: string): string {
  return join(dirname(file), `${basename(file, extname(file))}.d`);
}

/**
 * The `*.toml` files of the drop-in directory, in name order (byte order, as systemd sorts
 * its drop-ins: `10-fleet.toml` before `20-truck.toml`); none when there is no directory.
 */
export function dropInFiles(file: string): string[] {
  const dir = dropInDir(file);
  let names: string[];
  try {
    names = readdirSync(dir, { withFileTypes: true })
      .filter((e) => !e.isDirectory() && e.name.endsWith('.toml') && !e.name.startsWith('.'))
      .map((e) => e.name);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT' || (err as NodeJS.ErrnoException).code === 'ENOTDIR') return [];
    throw err;
  }
  return names.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)).map((n) => join(dir, n));
}

const isTable = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v) && !(v instanceof Date);

/** `over` merged into `base` (both parsed TOML), in place: tables key by key, APPENDED arrays appended. */
export function mergeToml(base: Record<string, unknown>, over: Record<string, unknown>, top = true): Record<string, unknown> {
  for (const [k, v] of Object.entries(over)) {
    const was = base[k];
    if (isTable(was) && isTable(v)) mergeToml(was, v, false);
    else if (top && APPENDED.includes(k) && Array.isArray(was) && Array.isArray(v)) base[k] = [...was, ...v];
    else base[k] = v;
  }
  return base;
}

/** One file of a config: its name and text. */
export interface ConfigPart {
  file: string;
  text: string;
}

/**
 * Where each setting of the merged config was written: for a path, the file and line of the
 * last file that set it (the one whose value is used), else of the nearest table above it.
 */
export class Origins {
  private readonly parts: Array<{ file: string; text: string; lines: Lines }> = [];
  /** How many tables of each APPENDED array the files added so far hold. */
  private readonly offsets: Record<string, number> = {};

  /** Add the next file; `raw` is its parsed TOML, which says how many [[sources]] it adds. */
  add(part: ConfigPart, raw: Record<string, unknown>): void {
    this.parts.push({ ...part, lines: tomlLines(part.text, this.offsets) });
    for (const k of APPENDED) if (Array.isArray(raw[k])) this.offsets[k] = (this.offsets[k] ?? 0) + raw[k].length;
  }

  /**
   * `file:line` of a problem's path. A path no file sets: the line where the first file shows
   * it commented out (the installed config's `# [[sources]]`), else that file alone.
   */
  where(path: string): string {
    let best: { file: string; line: number; depth: number } | undefined;
    for (const { file, lines } of this.parts) {
      const found = lineOf(lines, path);
      // The closest match wins (the key itself over its table); among equals, the later file.
      if (found && (!best || found.at.length >= best.depth)) best = { file, line: found.line, depth: found.at.length };
    }
    if (best) return `${best.file}:${best.line}`;
    const main = this.parts[0];
    if (!main) return '';
    const top = /^[\w-]+/.exec(path)?.[0];
    if (top) {
      const commented = main.text.split('\n').findIndex((l) => new RegExp(`^#\\s*\\[\\[?${top}[\\].]`).test(l) || new RegExp(`^#\\s*${top}\\s*=`).test(l));
      if (commented >= 0) return `${main.file}:${commented + 1}`;
    }
    return main.file;
  }
}
