/**
 * The line of a TOML file where each setting is: smol-toml gives values, not places, and a
 * problem must say which line to edit. A scan of the text, enough for what a config holds:
 * `[table]` and `[[array]]` headers (dotted, quoted), `key = value` (dotted, quoted keys),
 * values over several lines (arrays, multi-line strings), comments. Run only on text that
 * parsed, so it need not find mistakes.
 *
 * Paths are written as problems write them (validation.ts): `api.scac`, `sources[1].type`.
 */
import { formatPath } from '../validation.js';

export type Lines = Map<string, number>;

/** Each key of `[[name]]` headers, and where its tables start counting: the tables earlier files gave. */
export type Offsets = Record<string, number>;

/** Split a dotted key (`a."b.c".d`) into its parts. */
function keyParts(text: string): string[] {
  const parts: string[] = [];
  const re = /\s*(?:"((?:[^"\\]|\\.)*)"|'([^']*)'|([A-Za-z0-9_-]+))\s*(\.|$)/y;
  let m: RegExpExecArray | null;
  while (re.lastIndex < text.length && (m = re.exec(text))) {
    parts.push(m[1] !== undefined ? JSON.parse(`"${m[1]}"`) : (m[2] ?? m[3]));
    if (m[4] === '') break;
  }
  return parts;
}

/**
 * What is still open at the end of `value` (the rest of a line after `=`, or a whole
 * continuation line): the depth of brackets and braces, or a multi-line string.
 */
function scanValue(value: string, state: { depth: number; string: '"""' | "'''" | undefined }): void {
  let i = 0;
  while (i < value.length) {
    if (state.string) {
      const end = value.indexOf(state.string, i);
      if (end < 0) return;
      i = end + 3;
      state.string = undefined;
      continue;
    }
    const c = value[i];
    if (c === '#') return;
    if (value.startsWith('"""', i) || value.startsWith("'''", i)) {
      state.string = value.slice(i, i + 3) as '"""' | "'''";
      i += 3;
    } else if (c === '"') {
      i++;
      while (i < value.length && value[i] !== '"') i += value[i] === '\\' ? 2 : 1;
      i++;
    } else if (c === "'") {
      const end = value.indexOf("'", i + 1);
      i = end < 0 ? value.length : end + 1;
    } else {
      if (c === '[' || c === '{') state.depth++;
      else if (c === ']' || c === '}') state.depth--;
      i++;
    }
  }
}

/** The line (1-based) of every table header and key of `text`, by path. */
export function tomlLines(text: string, offsets: Offsets = {}): Lines {
  const lines: Lines = new Map();
  /** Tables of each `[[array]]` seen so far, by its path. */
  const counts = new Map<string, number>();
  let table: Array<string | number> = [];
  const state: { depth: number; string: '"""' | "'''" | undefined } = { depth: 0, string: undefined };
  /** A header's key as a path: each array of tables on the way is its last table. */
  const resolve = (parts: string[]): Array<string | number> => {
    const path: Array<string | number> = [];
    for (const part of parts) {
      path.push(part);
      const n = counts.get(formatPath(path));
      if (n !== undefined) path.push(n - 1);
    }
    return path;
  };
  for (const [i, line] of text.split('\n').entries()) {
    const no = i + 1;
    if (state.string || state.depth > 0) {
      scanValue(line, state);
      continue;
    }
    const header = /^\s*(\[\[?)\s*(.+?)\s*\]\]?\s*(#.*)?$/.exec(line);
    if (header) {
      const parts = keyParts(header[2]);
      if (header[1] === '[[') {
        const at = resolve(parts.slice(0, -1));
        at.push(parts[parts.length - 1]);
        const key = formatPath(at);
        const n = (counts.get(key) ?? (at.length === 1 ? (offsets[key] ?? 0) : 0)) + 1;
        counts.set(key, n);
        if (!lines.has(key)) lines.set(key, no);
        table = [...at, n - 1];
      } else {
        table = resolve(parts);
      }
      lines.set(formatPath(table), no);
      continue;
    }
    const kv = /^\s*((?:"(?:[^"\\]|\\.)*"|'[^']*'|[A-Za-z0-9_.\s-])+?)\s*=(.*)$/.exec(line);
    if (!kv) continue;
    lines.set(formatPath([...table, ...keyParts(kv[1])]), no);
    scanValue(kv[2], state);
  }
  return lines;
}

/**
 * The line of `path` (a problem's `sources[1].speed_kmh`), else of the nearest table or key
 * above it that the file has (a missing key: its table's header), with the path found.
 */
export function lineOf(lines: Lines, path: string): { line: number; at: string } | undefined {
  for (let p = path; p; ) {
    const line = lines.get(p);
    if (line !== undefined) return { line, at: p };
    const cut = Math.max(p.lastIndexOf('.'), p.lastIndexOf('['));
    if (cut <= 0) break;
    p = p.slice(0, cut);
  }
  return undefined;
}
