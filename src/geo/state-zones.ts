/**
 * The time zones of each two-letter state or province code the gazetteer uses (US states,
 * DC, PR and VI; Canadian provinces and territories; Mexican states in the two-letter codes
 * of places.ts), for a milestone typed with `--state` whose city the gazetteer does not
 * know: a state with one zone gives it, one with several cannot say which.
 *
 * One zone per set of rules in force now (America/Indiana/Indianapolis keeps New York's
 * rules: it is listed as America/New_York). A code two countries share (`BC`, `NL`, `CO`,
 * `MI`, `MO`: the interface has no country field) holds the zones of both, and so is
 * several zones unless both are one: Missouri (Chicago, with daylight time) and Morelos
 * (Mexico City, without) differ half the year. Small parts count (the Navajo Nation in
 * Arizona keeps daylight time; Kenora in Ontario is on Central time): a typed time must not
 * be an hour off because the town happens to be in one. test/geo/state-zones.test.ts checks
 * the table against the zone of every place of the gazetteer.
 */

/** Zones of a US state or territory, Canadian province or Mexican state (by its country). */
const US: Record<string, readonly string[]> = {
  AL: ['America/Chicago'],
  AK: ['America/Anchorage', 'America/Adak'],
  AZ: ['America/Phoenix', 'America/Denver'],
  AR: ['America/Chicago'],
  CA: ['America/Los_Angeles'],
  CO: ['America/Denver'],
  CT: ['America/New_York'],
  DE: ['America/New_York'],
  DC: ['America/New_York'],
  FL: ['America/New_York', 'America/Chicago'],
  GA: ['America/New_York'],
  HI: ['Pacific/Honolulu'],
  ID: ['America/Boise', 'America/Los_Angeles'],
  IL: ['America/Chicago'],
  IN: ['America/New_York', 'America/Chicago'],
  IA: ['America/Chicago'],
  KS: ['America/Chicago', 'America/Denver'],
  KY: ['America/New_York', 'America/Chicago'],
  LA: ['America/Chicago'],
  ME: ['America/New_York'],
  MD: ['America/New_York'],
  MA: ['America/New_York'],
  MI: ['America/Detroit', 'America/Chicago'],
  MN: ['America/Chicago'],
  MS: ['America/Chicago'],
  MO: ['America/Chicago'],
  MT: ['America/Denver'],
  NE: ['America/Chicago', 'America/Denver'],
  NV: ['America/Los_Angeles'],
  NH: ['America/New_York'],
  NJ: ['America/New_York'],
  NM: ['America/Denver'],
  NY: ['America/New_York'],
  NC: ['America/New_York'],
  ND: ['America/Chicago', 'America/Denver'],
  OH: ['America/New_York'],
  OK: ['America/Chicago'],
  OR: ['America/Los_Angeles', 'America/Boise'],
  PA: ['America/New_York'],
  RI: ['America/New_York'],
  SC: ['America/New_York'],
  SD: ['America/Chicago', 'America/Denver'],
  TN: ['America/Chicago', 'America/New_York'],
  TX: ['America/Chicago', 'America/Denver'],
  UT: ['America/Denver'],
  VT: ['America/New_York'],
  VA: ['America/New_York'],
  WA: ['America/Los_Angeles'],
  WV: ['America/New_York'],
  WI: ['America/Chicago'],
  WY: ['America/Denver'],
  PR: ['America/Puerto_Rico'],
  VI: ['America/St_Thomas'],
};

const CA: Record<string, readonly string[]> = {
  AB: ['America/Edmonton'],
  BC: ['America/Vancouver', 'America/Edmonton', 'America/Dawson_Creek'],
  MB: ['America/Winnipeg'],
  NB: ['America/Moncton'],
  NL: ['America/St_Johns', 'America/Goose_Bay'],
  NS: ['America/Halifax'],
  NT: ['America/Yellowknife'],
  NU: ['America/Iqaluit', 'America/Winnipeg', 'America/Edmonton', 'America/Atikokan'],
  ON: ['America/Toronto', 'America/Winnipeg', 'America/Atikokan'],
  PE: ['America/Halifax'],
  QC: ['America/Toronto', 'America/Puerto_Rico', 'America/Halifax'],
  SK: ['America/Regina', 'America/Edmonton'],
  YT: ['America/Whitehorse'],
};

const MX: Record<string, readonly string[]> = {
  AG: ['America/Mexico_City'],
  BC: ['America/Tijuana'],
  BS: ['America/Mazatlan'],
  CM: ['America/Merida'],
  CS: ['America/Mexico_City'],
  CH: ['America/Chihuahua', 'America/Ciudad_Juarez', 'America/Ojinaga'],
  CO: ['America/Monterrey', 'America/Matamoros'],
  CL: ['America/Mexico_City'],
  DF: ['America/Mexico_City'],
  DG: ['America/Monterrey'],
  GT: ['America/Mexico_City'],
  GR: ['America/Mexico_City'],
  HG: ['America/Mexico_City'],
  JA: ['America/Mexico_City'],
  EM: ['America/Mexico_City'],
  MI: ['America/Mexico_City'],
  MO: ['America/Mexico_City'],
  NA: ['America/Mazatlan', 'America/Bahia_Banderas'],
  NL: ['America/Monterrey', 'America/Matamoros'],
  OA: ['America/Mexico_City'],
  PU: ['America/Mexico_City'],
  QE: ['America/Mexico_City'],
  QR: ['America/Cancun'],
  SL: ['America/Mexico_City'],
  SI: ['America/Mazatlan'],
  SO: ['America/Hermosillo'],
  TB: ['America/Mexico_City'],
  TM: ['America/Matamoros', 'America/Monterrey'],
  TL: ['America/Mexico_City'],
  VE: ['America/Mexico_City'],
  YU: ['America/Merida'],
  ZA: ['America/Mexico_City'],
};

/** Each country's table, for the check against the gazetteer. */
export const STATE_ZONES_BY_COUNTRY = { US, CA, MX } as const;

/**
 * The zones of a two-letter code (any case), of every country using it: one for a
 * single-zone state, several for a state that spans zones (or a code two countries share),
 * none for a code that is no state or province the gazetteer knows.
 */
export function stateZones(code: string): string[] {
  const c = code.trim().toUpperCase();
  return [...new Set([...(US[c] ?? []), ...(CA[c] ?? []), ...(MX[c] ?? [])])];
}
