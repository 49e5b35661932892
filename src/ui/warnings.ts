/**
 * What the rules said when they let a page's milestone through (src/milestones/warnings.ts),
 * in a driver's words and language: no CLI option, no JSON field, the times and zones as the
 * rules give them. A recorded milestone is answered with a redirect (a reload then does not
 * post it again), so its warnings are kept for the page that follows, for the session that
 * recorded it: a driver who never sees them learns nothing of an arrival sent without a place.
 */
import type { MilestoneWarning } from '../milestones/warnings.js';
import type { translator } from './i18n.js';

type T = ReturnType<typeof translator>;

/** One warning, as the page shows it after `Saved`. */
export function pageWarning(w: MilestoneWarning, t: T): string {
  switch (w.kind) {
    case 'clock-change':
      return w.second === undefined ? t('warnClockSkipped', { text: w.text, zone: w.zone, readAs: w.readAs }) : t('warnClockTwice', { text: w.text, zone: w.zone, readAs: w.readAs, second: w.second });
    case 'offset-not-of-place':
      // Only from a time field a browser shows as plain text (no datetime-local): an offset typed.
      return t('warnOffset', { text: w.text, offset: w.offset, zone: w.zone, placeOffset: w.placeOffset, sentAs: w.sentAs, wall: w.wall });
    case 'read-in-fix-zone':
      return t('warnReadInFixZone', { text: w.text, zone: w.zone, thenZone: w.thenZone });
    case 'no-position':
      return `${t('warnNoPosition', { zone: w.zone })}${w.fillsIn ? t('warnFillsIn') : ''}`;
    case 'appointment-clock-change':
    case 'offset-not-in-state':
    case 'city-not-found':
    case 'city-without-state':
    case 'forced-code':
    case 'forced-old':
    case 'unfed-resource':
    case 'stale-appointment':
      // Cannot arise from the page: it types no state or city, never forces, and starts no
      // load (the stops' appointments and resource are checked at a load's start). Said by
      // kind should one ever come, and the log line names it (actions.ts).
      return t('warnOther', { kind: w.kind });
  }
}

/** Sessions the page holds at most (auth.ts), each with its last few milestones' warnings. */
const MAX_KEPT = 64;

/** The warnings of milestones recorded on the page, by session and milestone, the newest kept. */
export class KeptWarnings {
  private readonly kept = new Map<string, readonly MilestoneWarning[]>();

  keep(session: string, milestone: number, warnings: readonly MilestoneWarning[]): void {
    // A second tap's answer (no warnings of its own) leaves the first's.
    if (warnings.length === 0) return;
    const key = `${session} ${milestone}`;
    this.kept.delete(key);
    this.kept.set(key, warnings);
    for (const old of this.kept.keys()) {
      if (this.kept.size <= MAX_KEPT) break;
      this.kept.delete(old);
    }
  }

  of(session: string, milestone: number): readonly MilestoneWarning[] {
    return this.kept.get(`${session} ${milestone}`) ?? [];
  }
}
