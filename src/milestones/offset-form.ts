/**
 * What is wrong with a UTC offset typed after a time (`milestone --time`, `load start --from`),
 * when it is not one the reader takes (`Z`, `+05:30`, `+0530`, `+05`). Without this, `+5:30`
 * got the message for a local time, "expected ... without offset", as if no offset were
 * allowed, and a driver could not tell that the hours wanted two digits.
 */

/** A date and a time of day, then whatever was typed after it (maybe after a space). */
const AFTER_TIME = /^(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?)\s?(.+)$/;
/** Offsets the reader takes (localtime.ts INSTANT), hours and minutes in range or not. */
const GOOD_FORM = /^(?:[Zz]|[+-]\d{2}(?::?\d{2})?)$/;
const two = (n: string) => n.padStart(2, '0');

/**
 * Why the offset typed after `text`'s time of day is malformed, with the text as it should
 * be where that is clear; undefined when there is none or it is in good form (other checks
 * word other faults).
 */
export function offsetMistake(text: string): string | undefined {
  const m = AFTER_TIME.exec(text);
  if (!m) return undefined;
  const [head, rest] = [m[1]!, m[2]!];
  const bad = `the UTC offset ${JSON.stringify(rest)} in ${JSON.stringify(text)}`;
  if (GOOD_FORM.test(rest)) {
    const [h, mi] = [Number(rest.slice(1, 3)), Number(rest.replace(':', '').slice(3) || 0)];
    if (h > 23) return `${bad} has hours beyond 23 (offsets in use run from -12:00 to +14:00)`;
    if (mi > 59) return `${bad} has minutes beyond 59`;
    return undefined;
  }
  // `UTC-6`, `GMT+05:30`: the offset with the zone's name before it.
  const named = /^(?:UTC|GMT)([+-])(\d{1,2})(?::?(\d{2}))?$/i.exec(rest);
  if (named) return `${bad} is written after UTC: give it alone, ${head}${named[1]}${two(named[2]!)}:${named[3] ?? '00'}`;
  if (/^[A-Za-z]{2,5}$/.test(rest)) return `${bad} is a zone's name, not an offset: give the offset (such as ${head}-06:00) or the time in UTC with Z`;
  // `+5:30`, `-6`, `+530`: one digit of hours.
  const short = /^([+-])(\d)(?::?(\d{2}))?$/.exec(rest);
  if (short) return `${bad} needs two digits for its hours: ${head}${short[1]}0${short[2]}:${short[3] ?? '00'}`;
  if (/^[+-]\d{3}$/.test(rest)) return `${bad} has three digits: give hours and minutes, such as +05:30 or +0530`;
  if (/^[+-]\d{2}:\d$/.test(rest)) return `${bad} needs two digits for its minutes, such as ${rest.slice(0, 4)}30`;
  // `+0530x`, `Z.`: a good offset with more after it.
  const trailing = /^([Zz]|([+-])(\d{2})(?::?(\d{2}))?)(.+)$/.exec(rest);
  if (trailing) {
    const offset = trailing[2] === undefined ? 'Z' : `${trailing[2]}${trailing[3]}:${trailing[4] ?? '00'}`;
    return `${bad} has ${JSON.stringify(trailing[5])} after it: ${head}${offset}`;
  }
  return undefined;
}
