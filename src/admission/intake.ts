/** The context each source is given: its way into ingest, and its counts. */
import type { Logger } from 'pino';
import type { Reading } from '../reading.js';
import type { TimeGuardOptions } from './time-guard.js';
import type { SourceContext, SourceCounts } from '../sources/types.js';
import type { Ingest } from './ingest.js';
import type { OdometerOptions } from './odometer.js';

/** How a source's reading times are judged: against the window of the agent's clocks (src/clock.ts). */
export interface TimeCheck extends TimeGuardOptions {
  clock: { earliest(): number; latest(): number };
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

  readonly emit = (reading: Reading, where?: string): void => void this.ingest.admit(reading, this, where);

  readonly reject = (reason: string): void => this.ingest.refuse(this, reason);
}
