/**
 * The newest fix of each resource this process has admitted, committed or still queued: what
 * the driver's page and a milestone's position read before the buffer has it.
 */
import type { Fix } from '../buffer/types.js';
import type { Reading } from '../reading.js';

export class NewestFixes {
  private readonly byResource = new Map<string, Fix>();

  /** An admitted reading: kept when it has a position and is its resource's newest. */
  note(reading: Reading): void {
    if (reading.lat === undefined || reading.lon === undefined) return;
    const f = this.byResource.get(reading.resourceId);
    if (!f || reading.timeMs >= f.timeMs) this.byResource.set(reading.resourceId, { timeMs: reading.timeMs, lat: reading.lat, lon: reading.lon });
  }

  get(resourceId: string): Fix | undefined {
    return this.byResource.get(resourceId);
  }

  /** Their fixes were set aside from the buffer (src/admission/garbled-fixes.ts): none is the newest any more. */
  forget(resourceIds: Iterable<string>): void {
    for (const id of resourceIds) this.byResource.delete(id);
  }
}
