/**
 * What the daemon writes to the buffer's `state` table every few seconds, for `status` and
 * for its own next start (did it stop cleanly? was the buffer found corrupt?). A type of
 * its own, so that readers (the CLI) do not load the daemon to read it.
 */
import type { Ingest } from './admission/ingest.js';
import type { SenderStatus } from './delivery/context.js';
import type { SourceHealth } from './sources/types.js';
import type { PageView } from './ui/page.js';
import type { ClockView } from './gnss-clock.js';

export const DAEMON_STATE_KEY = 'daemon';

/**
 * The row is written when delivery changed (a push, a failure: status shows it at once), else
 * this often. Each write is a commit of its own, about 3 pages with the WAL's rounding to the
 * file system's 4 KB: every 15 s it cost some 250 B per reading at 1 Hz (a seventh of the
 * flash writes, bench row 5); once a minute, a quarter of that. `status` calls a daemon whose
 * row is older than three of these hung.
 */
export const STATE_INTERVAL_MS = 60_000;

export interface DaemonState {
  pid: number;
  /** The daemon's version (src/version.ts): after a package upgrade, the CLI's may be newer until a restart. */
  version?: string;
  deviceId: string;
  configFile: string;
  startedMs: number;
  updatedMs: number;
  running: boolean;
  keyOrigin: string;
  sender: SenderStatus;
  ingest: Ingest['stats'];
  sources: Array<{ name: string; type: string; timeRejected?: number } & SourceHealth>;
  nextTracePushMs: number | null;
  /** Room on the buffer's disk: free bytes, whether the reserve is in place. */
  disk?: { freeBytes: number | null; reserve: boolean; reserveBytes: number };
  /** The last jump of the wall clock seen (ms, signed) and when. */
  clockJump?: { ms: number; atMs: number };
  /** The system clock's state (src/gnss-clock.ts) and the readings held for a GNSS time. */
  clock?: ClockView & { held: number; heldExpired: number };
  /** The driver's page when `ui.listen` is set: where, or why it is not running. */
  page?: PageView;
  /** The fleet link when `[fleet]` is set: up, or why not. */
  fleet?: FleetView;
  /** The daemon stopped because it found the buffer corrupt (SQLite's words): the next start checks it whole. */
  corrupt?: string;
}

/** The fleet link (src/fleet/link.ts) as `status` shows it. */
export interface FleetView {
  url: string;
  clientId: string;
  connected: boolean;
  /** Why the last attempt failed, while not connected. */
  error: string | null;
}
