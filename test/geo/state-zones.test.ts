/**
 * The table of zones by state or province (src/geo/state-zones.ts) against the zone of every
 * place of the gazetteer: a state said to have one zone must not hold a town in another
 * (a typed time would be read an hour off there), and every code the gazetteer uses is in it.
 */
import { describe, expect, it } from 'vitest';
import { allPlaces } from '../../src/geo/places.js';
import { STATE_ZONES_BY_COUNTRY, stateZones } from '../../src/geo/state-zones.js';
import { zoneAt, zoneOffsetMinutes } from '../../src/geo/timezone.js';

/** The offsets of a zone over 2026 and 2027, every half month: two zones with the same are one zone today. */
const START = Date.UTC(2026, 0, 1);
const signature = (zone: string) => Array.from({ length: 48 }, (_, i) => zoneOffsetMinutes(zone, START + i * 15 * 86_400_000)).join(',');

/**
 * Places whose zone, as the position lookup (tz-lookup's compact map) gives it, is another
 * state's: within a few km of a border (Blaine WA, Calais ME, the Belize line in Quintana
 * Roo), or towns that keep their neighbours' clock (Phenix City AL on Eastern time, West
 * Wendover NV on Mountain time). Their own zone comes from the gazetteer, not the table; the
 * table is for a town the gazetteer lacks. Any other place outside its state's zones fails.
 */
const BORDER: Record<string, string[]> = {
  'CA AB': ['Cardston', 'Provost', 'Cold Lake', 'Grand Centre'],
  'CA BC': ['Oliver', 'Osoyoos', 'Fruitvale', 'Salmo'],
  'CA MB': ['Roblin', 'Swan River'],
  'CA NB': ['Campbellton'],
  'CA NT': ['Fort McPherson'],
  'CA NU': ['Rankin Inlet', 'Kugluktuk', 'Gjoa Haven'],
  'CA PE': ['Fallingbrook'],
  'MX BC': ['Guerrero Negro'],
  'MX CH': ['Guadalupe y Calvo', 'Yécora'],
  'MX DG': ['Pueblo Nuevo', 'San Bernardino de Milpillas Chico', 'Tamazula de Victoria', 'El Durazno'],
  'MX JA': ['El Colomo', 'Puente de Camotlán', 'San Andrés Cohamiata'],
  'MX QR': ['Caobas', 'Carlos A. Madrazo', 'Juan Sarabia', 'Sabidos', 'Sergio Butrón Casas', 'Subteniente López', 'Ucum', 'Tepich', 'Tihosuco', 'X Cabil', 'Nuevo Xcán'],
  'MX SI': ['Cosalá', 'Chinobampo', 'Choix', 'El Fuerte'],
  'MX SO': ['Milpillas', 'Ejido Lagunitas', 'Islita'],
  'MX YU': ['Kanxoc'],
  'US AK': ['Petersburg', 'Wrangell'],
  'US AL': ['Huguley', 'Ladonia', 'Lanett', 'Phenix City', 'Smiths Station', 'Valley'],
  'US AZ': ['Yuma', 'Ehrenberg', 'Scenic', 'Beaver Dam'],
  'US CA': ['Big River'],
  'US GA': ['Blakely', 'Donalsonville', 'Cave Spring', 'Summerville'],
  'US IL': ['Palestine', 'Sheldon'],
  'US ME': ['Eastport', 'Calais', 'Hodgdon', 'Houlton', 'Limestone', 'Madawaska', 'Van Buren'],
  'US MN': ['Hallock', 'Roseau', 'Warroad'],
  'US MT': ['Eureka', 'Scobey', 'Plentywood'],
  'US ND': ['Crosby', 'Bowbells', 'Mohall', 'Bottineau', 'Belcourt', 'Rolla', 'Shell Valley', 'Langdon', 'Cavalier'],
  'US NM': ['Texico'],
  'US NV': ['West Wendover'],
  'US OK': ['Boise City'],
  'US TX': ['La Joya', 'Penitas'],
  'US WA': ['Point Roberts', 'Blaine'],
};

describe('zones by state or province', () => {
  it("every place of the gazetteer lies in one of its state's zones", () => {
    const sigs = new Map<string, string>();
    const sig = (zone: string) => {
      let s = sigs.get(zone);
      if (s === undefined) sigs.set(zone, (s = signature(zone)));
      return s;
    };
    const misses = new Map<string, string[]>();
    let places = 0;
    for (const p of allPlaces()) {
      places += 1;
      const table = STATE_ZONES_BY_COUNTRY[p.country][p.state];
      const key = `${p.country} ${p.state}`;
      if (!table) {
        misses.set(key, ['no entry']);
        continue;
      }
      const zone = zoneAt(p.lat, p.lon);
      if (table.some((z) => sig(z) === sig(zone)) || BORDER[key]?.includes(p.city)) continue;
      misses.set(key, [...(misses.get(key) ?? []), `${p.city} (${p.lat}, ${p.lon}): ${zone}`]);
    }
    expect(places).toBeGreaterThan(26_000);
    expect(Object.fromEntries(misses)).toEqual({});
  });

  it('a code two countries use holds the zones of both; an unknown code none', () => {
    expect(stateZones('il')).toEqual(['America/Chicago']);
    expect(stateZones('KS')).toEqual(['America/Chicago', 'America/Denver']);
    expect(stateZones('MO')).toEqual(['America/Chicago', 'America/Mexico_City']);
    expect(stateZones('JA')).toEqual(['America/Mexico_City']);
    expect(stateZones('ZZ')).toEqual([]);
  });
});
