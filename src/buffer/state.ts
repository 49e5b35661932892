/**
 * Small records beside the data: the daemon's state (for `status` and its own next start)
 * and counters that outlive a restart (readings dropped by the limits).
 */
import type { DB } from './db.js';
import type { BufferContext } from './store.js';

export class StateTable {
  private readonly db: DB;

  constructor(private readonly ctx: BufferContext) {
    this.db = ctx.db;
  }

  setState(key: string, value: unknown, nowMs: number): void {
    this.ctx.withReserve(() =>
      this.db
        .prepare('INSERT INTO state (key, value, updated_ms) VALUES (?, ?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value, updated_ms = excluded.updated_ms')
        .run(key, JSON.stringify(value), nowMs),
    );
  }

  getState<T>(key: string): { value: T; updatedMs: number } | undefined {
    const r = this.db.prepare('SELECT value, updated_ms FROM state WHERE key = ?').get(key) as { value: string; updated_ms: number } | undefined;
    return r && { value: JSON.parse(r.value) as T, updatedMs: r.updated_ms };
  }

  bump(counter: string, by: number): void {
    if (by === 0) return;
    this.db.prepare('INSERT INTO counters (name, value) VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET value = value + excluded.value').run(counter, by);
  }

  counters(): Record<string, number> {
    return Object.fromEntries((this.db.prepare('SELECT name, value FROM counters ORDER BY name').all() as { name: string; value: number }[]).map((r) => [r.name, r.value]));
  }
}
