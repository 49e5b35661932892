/**
 * A milestone the rules refuse (src/milestones/record.ts, typed-time.ts), in words a driver can
 * act on: the rules' own messages are the CLI's, naming --time, --force and config settings,
 * and a UTC instant where the driver typed a local time. The page has none of those.
 */
import { DuplicateEventError } from '../buffer/store.js';
import type { MilestoneError } from '../milestones/record.js';
import { TimeRefusal } from '../milestones/typed-time.js';
import type { translator } from './i18n.js';
import { wallClock } from './view.js';

type T = ReturnType<typeof translator>;

/** What the page says of `err`, and whether it is the second of a kind (409); undefined: none of the refusals a driver can meet. */
export function driverWords(err: MilestoneError, t: T, appointment: boolean): { text: string; already: boolean } | undefined {
  const cause = err.cause;
  if (cause instanceof DuplicateEventError) return { text: t('already', { time: wallClock(cause.existing.body.time) }), already: true };
  if (!(cause instanceof TimeRefusal)) return undefined;
  const words = {
    form: () => t('timeForm'),
    'no-zone': () => t(appointment ? 'timeNoZoneAppointment' : 'timeNoZone'),
    'before-floor': () => t('timeBeforeFloor'),
    'too-far-ahead': () => t('timeTooFarAhead'),
    'too-old': () => t('timeTooOld', { days: cause.days?.behind ?? '?', max: cause.days?.max ?? '?' }),
    ahead: () => t('timeAhead'),
  };
  return { text: words[cause.problem](), already: false };
}
