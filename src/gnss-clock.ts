/**
 * Time while the system clock is not synchronised (src/clock-sync.ts says whether it is).
 * Measured before this existed: a device booted with its clock 12 h behind refused every
 * good gpsd fix as "43200 s in the future" until network time came, hours later in a dead zone.
 *
 * The clock's state, shown by `status`, `/healthz` and `/metrics`:
 * - `synchronised`: the system clock is set; every reading is judged against it as always;
 * - `gnss`: it is not, and a GNSS fix has given the offset between GNSS time and the system
 *   clock: fixes are judged against the previous GNSS time carried forward on the monotonic
 *   clock, and readings only the system clock stamps (1-Wire, exec lines without `time`,
 *   modules) are re-stamped by the offset;
 * - `unsynchronised`: neither; fixes are kept if not before the floor, too old, or
 *   implausibly far ahead, and GNSS time is taken once two of them agree
 *   (src/gnss-first-fix.ts); system-stamped readings wait for it (src/admission/clock-hold.ts).
 *
 * An offset under LATENCY_MS is the way from the receiver to here (gpsd's reporting, a serial
 * line), not a wrong clock: nothing is re-stamped by it.
 */
import { type ClockSources, systemClocks } from './clock.js';
import type { SyncAnswer } from './clock-sync.js';
import { FirstFix } from './gnss-first-fix.js';
import type { Reading } from './reading.js';

/** Which clock stamped a reading (see `Reading.clock`); undefined: the device's own. */
export type Stamp = Reading['clock'];

export type ClockState = 'synchronised' | 'gnss' | 'unsynchronised';

export const LATENCY_MS = 2000;

/** What `status`, `/healthz` and `/metrics` show of the clock. */
export interface ClockView {
  state: ClockState;
  /** Where the synchronised-or-not answer came from. */
  from: string;
  /** GNSS time minus system time at the newest fix, ms (null: no fix yet). */
  offsetMs: number | null;
}

/**
 * The true time first known this run after fixes were admitted without it: GNSS time taken
 * from two fixes that agree, or the system clock's answer turning synchronised before they
 * did. See src/admission/garbled-fixes.ts.
 */
export interface TimeKnown {
  /** What gave it: GNSS time, or the system clock once synchronised. */
  by: 'gnss' | 'clock';
  timeMs: number;
  /** How long the run had been up on the monotonic clock then. */
  upMs: number;
  /** The sources whose fixes were admitted before it. */
  sources: string[];
}

/** The window a reading's time is judged against (see time-guard.ts `NowWindow`). */
export interface JudgeWindow {
  earliestMs: number;
  latestMs: number;
}

/** The agent's clocks as a time is judged against them (src/clock.ts TrustedClock). */
export interface JudgeBase {
  earliest(): number;
  latest(): number;
  /** The newest time known to have passed (the buffer's newest reading carried forward). */
  newestKnown?(): number;
}

export class GnssClock {
  private sync: SyncAnswer = { synchronised: undefined, from: 'not asked yet' };
  /** The newest GNSS time seen, and the monotonic time it came at. */
  private anchor: { timeMs: number; mono: number } | undefined;
  /** GNSS time minus the wall clock, at the anchor. */
  private offsetMs: number | undefined;
  private readonly listeners = new Set<(view: ClockView) => void>();
  private readonly warners = new Set<(text: string) => void>();
  private readonly first: FirstFix;
  private readonly knownListeners = new Set<(known: TimeKnown) => void>();
  /** Sources of the fixes admitted while no GNSS time is known: their rows are looked at when the true time is. */
  private readonly firstSources = new Set<string>();
  /** The true time was told (TimeKnown): once a run, whichever came first. */
  private knownTold = false;
  private readonly startMono: number;
  /** Whether a source giving GNSS time runs (gpsd, nmea): only then do system stamps wait for one. */
  expectGnss = false;

  constructor(private readonly clocks: ClockSources = systemClocks) {
    this.startMono = clocks.mono();
    this.first = new FirstFix(clocks, (text) => {
      for (const fn of this.warners) fn(text);
    });
  }

  get synchronised(): boolean {
    return this.sync.synchronised === true;
  }

  /** Whether a fix's own time can be judged now: the clock is synchronised, or GNSS time was taken from fixes that agree. */
  timeKnown(): boolean {
    return this.synchronised || this.anchor !== undefined;
  }

  state(): ClockState {
    if (this.synchronised) return 'synchronised';
    return this.offsetMs === undefined ? 'unsynchronised' : 'gnss';
  }

  view(): ClockView {
    return { state: this.state(), from: this.sync.from, offsetMs: this.offsetMs === undefined ? null : Math.round(this.offsetMs) };
  }

  /** Told of every change of state (a log line, the state row). */
  onChange(fn: (view: ClockView) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  /** Told of fixes not believed as GNSS time (a log line). */
  onWarning(fn: (text: string) => void): () => void {
    this.warners.add(fn);
    return () => this.warners.delete(fn);
  }

  /**
   * Told once a run, when the true time is first known after fixes came without it: GNSS time
   * taken from two fixes that agree, or the clock's answer turning synchronised before that.
   */
  onTimeKnown(fn: (known: TimeKnown) => void): () => void {
    this.knownListeners.add(fn);
    return () => this.knownListeners.delete(fn);
  }

  /** The system's answer to "is the clock set?" (asked at start and every minute). */
  setSync(answer: SyncAnswer): void {
    const before = this.state();
    const fromChanged = answer.from !== this.sync.from;
    this.sync = answer;
    if (this.state() !== before || fromChanged) this.tell();
    // Synchronised before two fixes agreed: GNSS time is never taken now (a synchronised clock
    // needs none), so the fixes admitted without a true time are judged by the clock. No
    // anchor yet and a source seen: they came unsynchronised (on a synchronised clock the first anchors).
    if (before !== 'synchronised' && this.synchronised && !this.anchor && this.firstSources.size > 0) this.known('clock', this.clocks.wall());
  }

  /** GNSS time now, carried forward on the monotonic clock from the newest fix; undefined before one. */
  reckon(): number | undefined {
    return this.anchor && this.anchor.timeMs + (this.clocks.mono() - this.anchor.mono);
  }

  /**
   * A GNSS fix was admitted with this time (from `source`): the newest one anchors GNSS time
   * and the offset; the first anchor only once two fixes agree (src/gnss-first-fix.ts).
   */
  noteFix(timeMs: number, source?: string, dateCarried = false): void {
    if (this.anchor && timeMs < this.anchor.timeMs) return;
    if (!this.anchor && source !== undefined) this.firstSources.add(source);
    // A synchronised clock needs no GNSS time, and its window already keeps out a fix dated
    // ahead: the anchor is only kept for a clock that loses its synchronisation. A date carried
    // from an earlier sentence would agree with the sentence it came from, garbled or not.
    if (!this.anchor && !this.synchronised && (dateCarried || !this.first.agrees(timeMs, source))) return;
    const before = this.state();
    const taken = !this.anchor && !this.synchronised;
    this.anchor = { timeMs, mono: this.clocks.mono() };
    this.offsetMs = timeMs - this.clocks.wall();
    if (this.state() !== before) this.tell();
    if (taken) this.known('gnss', timeMs);
  }

  /**
   * "Now" for what a driver or dispatch records in the running agent (a milestone of now, a
   * load's start or end): GNSS time while the system clock is not synchronised and a fix has
   * given it, else the system clock (as src/cli/now.ts for the CLI). A device booted 12 h
   * behind would otherwise record the page's "Arrived" half a day early.
   */
  commandNow(): number {
    const wall = this.clocks.wall();
    if (this.state() !== 'gnss' || this.offsetMs === undefined || Math.abs(this.offsetMs) < LATENCY_MS) return wall;
    return this.reckon() ?? wall;
  }

  /** The wall clock was stepped: the offset is measured again from the anchor (it ran on the monotonic clock). */
  clockStepped(): void {
    const now = this.reckon();
    if (now !== undefined) this.offsetMs = now - this.clocks.wall();
  }

  /** Whether a system-stamped reading should wait for a GNSS time now. */
  shouldHold(): boolean {
    return this.expectGnss && this.state() === 'unsynchronised';
  }

  /**
   * The reading's time as the agent believes it (re-stamped when only the system clock
   * stamped it and the offset says that clock is wrong), and the window to judge it against:
   * the agent's usual window while synchronised; otherwise GNSS time carried forward for a
   * fix (no upper bound before the first), and the later of the usual window and GNSS time
   * for the rest.
   */
  judge(timeMs: number, stamp: Stamp, base: JudgeBase): { timeMs: number; window: JudgeWindow } {
    const earliestMs = base.earliest();
    if (this.synchronised) return { timeMs, window: { earliestMs, latestMs: base.latest() } };
    const gnssNow = this.reckon();
    if (stamp === 'gnss') return { timeMs, window: { earliestMs, latestMs: gnssNow ?? Number.POSITIVE_INFINITY } };
    const latestMs = Math.max(base.latest(), gnssNow ?? Number.NEGATIVE_INFINITY);
    const off = this.offsetMs;
    const restamp = stamp === 'system' && off !== undefined && Math.abs(off) >= LATENCY_MS;
    return { timeMs: restamp ? Math.round(timeMs + off) : timeMs, window: { earliestMs, latestMs } };
  }

  /** Why a fix cannot be believed before any GNSS time is known (implausibly far ahead), or undefined. */
  firstFixProblem(timeMs: number, stamp: Stamp, base: JudgeBase): string | undefined {
    if (this.synchronised || this.anchor || stamp !== 'gnss') return undefined;
    return this.first.problem(timeMs, Math.max(base.latest(), base.newestKnown?.() ?? Number.NEGATIVE_INFINITY));
  }

  private known(by: TimeKnown['by'], timeMs: number): void {
    if (this.knownTold) return;
    this.knownTold = true;
    const t: TimeKnown = { by, timeMs, upMs: this.clocks.mono() - this.startMono, sources: [...this.firstSources] };
    for (const fn of this.knownListeners) fn(t);
  }

  private tell(): void {
    const v = this.view();
    for (const fn of this.listeners) fn(v);
  }
}
