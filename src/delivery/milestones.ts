/**
 * Sending milestones, in the order they were recorded, before any trace: a 2xx (or a 409 to
 * one that went out before, or that the client sent twice: the service has it) marks one sent with the answer's correlation id; a refusal parks it
 * with the whole answer so the ones after it do not wait; anything else pauses delivery.
 */
import type { MilestoneRow } from '../buffer/store.js';
import { completePlace } from '../milestones/record.js';
import { correlationIdOf, describeOutcome, isDelivered } from './classify.js';
import type { DeliveryContext } from './context.js';

export class MilestoneSender {
  constructor(private readonly ctx: DeliveryContext) {}

  /** Send pending milestones in the order they were recorded. False when delivery must pause. */
  async send(): Promise<boolean> {
    const { ctx } = this;
    const { store, client, config, log } = ctx.deps;
    for (;;) {
      const batch = store.pendingMilestones(50);
      if (batch.length === 0) return true;
      for (const m0 of batch) {
        if (ctx.stopping) return false;
        const m = m0.needsPlace ? this.withPlace(m0) : m0;
        const body = { ...client.extraFields, ...m.body };
        const sentBefore = m.attempts > 0;
        store.markMilestoneAttempt(m.id);
        const outcome = await ctx.post(() => client.postMilestone(body, m.ref, ctx.signal), sentBefore);
        const cls = ctx.classify(outcome, sentBefore);
        if (isDelivered(cls) && outcome.kind === 'response') {
          const correlationId = correlationIdOf(outcome, config.api.correlation_id_field, config.api.correlation_id_header);
          store.markMilestoneSent(m.id, ctx.now(), { status: outcome.status, correlationId, duplicate: cls === 'duplicate' });
          ctx.status.sent.milestones += 1;
          if (cls === 'duplicate') {
            ctx.status.duplicates += 1;
            log.info({ load: m.loadNumber, code: m.body.eventCode, id: m.id, correlationId }, 'milestone already at the service (HTTP 409): counted as delivered, a duplicate');
          } else {
            log.info({ load: m.loadNumber, code: m.body.eventCode, id: m.id, correlationId }, 'milestone delivered');
          }
          continue;
        }
        const why = describeOutcome(outcome);
        const answer = outcome.kind === 'response' ? outcome : undefined;
        if (cls === 'refused' || cls === 'too-large') {
          // This milestone will never be accepted as it is; the ones after it must not wait for it.
          store.parkMilestone(m, answer?.status ?? null, answer ? answer.body : why, ctx.now(), answer?.headers);
          ctx.status.deadLettered.milestones += 1;
          log.error({ load: m.loadNumber, milestone: m.id, code: m.body.eventCode }, `milestone refused and parked in the dead-letter table: ${why}`);
          continue;
        }
        store.markMilestoneFailed(m.id, why, answer?.status ?? null);
        ctx.fail(cls, why, outcome, { load: m.loadNumber, milestone: m.id });
        return false;
      }
    }
  }

  /**
   * A milestone recorded where no position was known (by the CLI right after `load start`,
   * before the first commit): the daemon's newest fix of the resource, committed or not, or
   * the buffer's last fix, gives it its place and zone now, once, before it is first sent.
   */
  private withPlace(m: MilestoneRow): MilestoneRow {
    const { store, config, log, fixOf } = this.ctx.deps;
    try {
      const load = store.getLoad(m.loadNumber);
      const mine = load && fixOf?.(load.resourceId);
      const stored = load && store.lastFix(load.resourceId);
      const fix = mine && (!stored || mine.timeMs >= stored.timeMs) ? mine : stored;
      const body = load && fix ? completePlace(m, fix, config) : undefined;
      if (body) {
        store.setMilestoneBody(m.id, body);
        log.info({ load: m.loadNumber, milestone: m.id, city: body.eventCity, state: body.eventState }, 'milestone recorded without a position: place and zone taken from the newest fix');
        return { ...m, body, needsPlace: false };
      }
      store.setMilestoneBody(m.id, m.body);
      log.warn(
        { load: m.loadNumber, milestone: m.id, resource: load?.resourceId },
        `milestone ${m.id} goes out without a city and state, in the zone it was recorded in (${String((m.body.time as { timeZoneOffset?: unknown } | undefined)?.timeZoneOffset)}): no fix of its resource within milestones.max_fix_age_s (${config.milestones.max_fix_age_s} s) of its time (of when it was recorded, for an appointment)`,
      );
    } catch (err) {
      log.warn({ milestone: m.id, err: (err as Error).message }, 'could not fill in the place of a milestone; sending it as recorded');
    }
    return { ...m, needsPlace: false };
  }
}
