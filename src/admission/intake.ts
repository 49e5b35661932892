/** The context each source is given: its way into ingest, and its counts. */
import type { Logger } from 'pino';
import type { Reading } from '../reading.js';
import type { TimeGuardOptions } from './time-guard.js';
import type { SourceContext, SourceCounts } from '../sources/types.js';
import type { Ingest } from './ingest.js';
import type { OdometerOptions } from './odometer.js';
import type { GnssClock, JudgeBase, Stamp } from '../gnss-clock.js';
import type { ClockHold } from './clock-hold.js';

/** How a source's reading times are judged: against the window of the agent's clocks (src/clock.ts). */
export interface TimeCheck extends TimeGuardOptions {
  clock: JudgeBase;
  /** Time while the system clock is not synchronised: judges and re-stamps (src/gnss-clock.ts). */
  gnss?: GnssClock;
  /** Where system-stamped readings wait for a GNSS time. */
  hold?: ClockHold;
  /** Which clock stamps the source's readings when a reading does not say (`Reading.clock`). */
  stamp?: Stamp;
}

/**
 * One source's way into the buffer, given to it as its SourceContext: what it hands over
 * goes through `Ingest.admit`, and its counts are kept here for its health.
 */
export class SourceIntake implements SourceContext {
  readonly counts: SourceCounts = { readings: 0, rejected: 0, timeRejected: 0 };

  constructor(
    private readonly ingest: Ingest,
    /** Tags the source's rows; the agent sets it to the source's own name once that exists. */
    public name: string,
    readonly log: Logger,
    /** How its reading times are judged; undefined: not at all (the simulator's clock runs ahead on purpose). */
    readonly time?: TimeCheck,
    /** Readings with a position get the GNSS odometer's total (`odometer = "gnss"`); undefined: not. */
    readonly odometer?: OdometerOptions,
  ) {}

  readonly emit = (reading: Reading, where?: string): void => {
    const hold = this.time?.hold;
    if (hold?.wants(reading.clock ?? this.time?.stamp)) hold.add(() => void this.ingest.admit(reading, this, where));
    else this.ingest.admit(reading, this, where);
  };

  readonly reject = (reason: string): void => this.ingest.refuse(this, reason);

  readonly find = (reading: Reading): number | 'stored' | undefined => this.ingest.find(reading, this.name);
}
