import { describe, it, expect } from 'vitest';
import { MEXICO_STATE_CODES, placeAt, placeNamed } from '../../src/geo/places.js';

describe('placeAt: spot checks across the continent', () => {
  it('Chicago, IL (downtown is the city, not the nearest listed neighbourhood)', () => {
    expect(placeAt(41.8781, -87.6298)).toEqual({ city: 'Chicago', state: 'IL', country: 'US' });
    expect(placeAt(41.8819, -87.6278)).toMatchObject({ city: 'Chicago', state: 'IL' });
  });

  it('Toronto, ON', () => {
    expect(placeAt(43.6532, -79.3832)).toEqual({ city: 'Toronto', state: 'ON', country: 'CA' });
  });

  it("St. John's, NL", () => {
    expect(placeAt(47.5615, -52.7126)).toEqual({ city: "St. John's", state: 'NL', country: 'CA' });
  });

  it('Regina, SK', () => {
    expect(placeAt(50.4452, -104.6189)).toEqual({ city: 'Regina', state: 'SK', country: 'CA' });
  });

  it('Guadalajara, JA (Jalisco)', () => {
    expect(placeAt(20.6597, -103.3496)).toEqual({ city: 'Guadalajara', state: 'JA', country: 'MX' });
  });

  it('Monterrey, NL (Nuevo León; same letters as Newfoundland, hence country)', () => {
    expect(placeAt(25.6866, -100.3161)).toEqual({ city: 'Monterrey', state: 'NL', country: 'MX' });
  });

  it('Mexico City, DF; Querétaro, QE; Tijuana, BC', () => {
    expect(placeAt(19.4326, -99.1332)).toEqual({ city: 'Mexico City', state: 'DF', country: 'MX' });
    expect(placeAt(20.5888, -100.3899)).toEqual({ city: 'Santiago de Querétaro', state: 'QE', country: 'MX' });
    expect(placeAt(32.5149, -117.0382)).toEqual({ city: 'Tijuana', state: 'BC', country: 'MX' });
  });

  it('more of the map: New York, Los Angeles, Anchorage, Honolulu, Whitehorse, San Juan PR', () => {
    expect(placeAt(40.754, -73.984)).toMatchObject({ state: 'NY' });
    expect(placeAt(34.0522, -118.2437)).toMatchObject({ city: 'Los Angeles', state: 'CA' });
    expect(placeAt(61.2181, -149.9003)).toMatchObject({ city: 'Anchorage', state: 'AK' });
    expect(placeAt(21.3069, -157.8583)).toMatchObject({ city: 'Honolulu', state: 'HI' });
    expect(placeAt(60.7212, -135.0568)).toMatchObject({ city: 'Whitehorse', state: 'YT' });
    expect(placeAt(18.4655, -66.1057)).toMatchObject({ city: 'San Juan', state: 'PR', country: 'US' });
    expect(placeAt(45.5017, -73.5673)).toMatchObject({ state: 'QC' });
    expect(placeAt(49.2827, -123.1207)).toMatchObject({ city: 'Vancouver', state: 'BC' });
  });

  it('a point near a small town returns that town', () => {
    // Marfa, TX (pop. ~1,700), 1.3 km north-west of its GeoNames point
    expect(placeAt(30.32, -104.03)).toEqual({ city: 'Marfa', state: 'TX', country: 'US' });
    // Stockton, KS (pop. ~1,300)
    expect(placeAt(39.44, -99.27)).toEqual({ city: 'Stockton', state: 'KS', country: 'US' });
    // Wawa, ON on the Trans-Canada, far from anything bigger
    expect(placeAt(47.99, -84.78)).toEqual({ city: 'Wawa', state: 'ON', country: 'CA' });
  });
});

describe('placeAt: outside the US, Canada and Mexico', () => {
  it('a point in the Atlantic is undefined', () => {
    expect(placeAt(38, -60)).toBeUndefined();
    expect(placeAt(25, -90)).toBeUndefined(); // middle of the Gulf of Mexico
  });

  it('neighbouring countries are undefined, not the nearest town across the water', () => {
    expect(placeAt(23.1136, -82.3666)).toBeUndefined(); // Havana
    expect(placeAt(17.5046, -88.1962)).toBeUndefined(); // Belize City
    expect(placeAt(14.6349, -90.5069)).toBeUndefined(); // Guatemala City
  });

  it('elsewhere in the world and the empty north are undefined', () => {
    expect(placeAt(51.5, -0.1)).toBeUndefined(); // London
    expect(placeAt(-33.9, 151.2)).toBeUndefined(); // Sydney
    expect(placeAt(75, -100)).toBeUndefined(); // Nunavut, nothing within 100 km
    expect(placeAt(89.9, 0)).toBeUndefined();
  });

  it('bad coordinates are undefined, never a throw', () => {
    expect(placeAt(Number.NaN, -87)).toBeUndefined();
    expect(placeAt(41, Number.POSITIVE_INFINITY)).toBeUndefined();
    expect(placeAt(91, -87)).toBeUndefined();
    expect(placeAt(41, -181)).toBeUndefined();
    expect(placeAt('41' as unknown as number, -87)).toBeUndefined();
  });
});

describe('placeAt: data and codes', () => {
  it('always returns a two-letter code and a non-empty city', () => {
    let seen = 0;
    for (let lat = 15; lat <= 70; lat += 0.7) {
      for (let lon = -168; lon <= -52; lon += 0.7) {
        const p = placeAt(lat, lon);
        if (!p) continue;
        seen++;
        expect(p.state).toMatch(/^[A-Z]{2}$/);
        expect(p.city.length).toBeGreaterThan(0);
        expect(['US', 'CA', 'MX']).toContain(p.country);
      }
    }
    expect(seen).toBeGreaterThan(3000);
  });

  it('Mexican codes: 32 distinct ones, and the data uses only those', () => {
    const codes = new Set(Object.values(MEXICO_STATE_CODES));
    expect(codes.size).toBe(32);
    for (let lat = 14.6; lat <= 32.7; lat += 0.5) {
      for (let lon = -117.1; lon <= -86.8; lon += 0.5) {
        const p = placeAt(lat, lon);
        if (p?.country === 'MX') expect(codes.has(p.state), `${p.city} ${p.state}`).toBe(true);
      }
    }
  });
});

describe('placeNamed: a place by name and state', () => {
  it('Chicago, IL and Indianapolis, IN, with the position GeoNames gives', () => {
    expect(placeNamed('Chicago', 'IL')).toEqual({ city: 'Chicago', state: 'IL', country: 'US', lat: 41.85, lon: -87.65 });
    expect(placeNamed('Indianapolis', 'IN')).toEqual({ city: 'Indianapolis', state: 'IN', country: 'US', lat: 39.7684, lon: -86.158 });
    // The position leads back to the same place.
    const { lat, lon } = placeNamed('Chicago', 'IL')!;
    expect(placeAt(lat, lon)).toEqual({ city: 'Chicago', state: 'IL', country: 'US' });
  });

  it('ignores case, accents and punctuation in the name, and case in the state', () => {
    expect(placeNamed('CHICAGO', 'il')).toMatchObject({ city: 'Chicago', state: 'IL' });
    expect(placeNamed(' chicago ', ' Il ')).toMatchObject({ city: 'Chicago', state: 'IL' });
    expect(placeNamed('Mérida', 'YU')).toMatchObject({ city: 'Mérida', country: 'MX' });
    expect(placeNamed('merida', 'yu')).toMatchObject({ city: 'Mérida', country: 'MX' });
    expect(placeNamed('Winston Salem', 'NC')).toMatchObject({ city: 'Winston-Salem' });
    expect(placeNamed('St Johns', 'NL')).toMatchObject({ city: "St. John's" });
  });

  it('Querétaro, QE: the state capital, whose GeoNames name is Santiago de Querétaro', () => {
    const queretaro = { city: 'Santiago de Querétaro', state: 'QE', country: 'MX', lat: 20.5881, lon: -100.3881 };
    expect(placeNamed('Querétaro', 'QE')).toEqual(queretaro);
    expect(placeNamed('queretaro', 'qe')).toEqual(queretaro);
    expect(placeNamed('Santiago de Querétaro', 'QE')).toEqual(queretaro);
    // A village of that exact name exists, in Chiapas.
    expect(placeNamed('Queretaro', 'CS')).toMatchObject({ city: 'Querétaro', state: 'CS', lat: 15.8375 });
    // Whole words only: a piece of a word is no match.
    expect(placeNamed('Queret', 'QE')).toBeUndefined();
  });

  it("Mexican cities' long official names: Heroica X, Ciudad X, X de ..., ... de X", () => {
    expect(placeNamed('Matamoros', 'TM')).toMatchObject({ city: 'Heroica Matamoros', state: 'TM' });
    expect(placeNamed('Victoria', 'TM')).toMatchObject({ city: 'Ciudad Victoria', state: 'TM' });
    expect(placeNamed('Leon', 'GT')).toMatchObject({ city: 'León de los Aldama', state: 'GT' });
    expect(placeNamed('Acapulco', 'GR')).toMatchObject({ city: 'Acapulco de Juárez', state: 'GR' });
    expect(placeNamed('Durango', 'DG')).toMatchObject({ city: 'Victoria de Durango', state: 'DG' });
    // Other names holding the words are no match: East Chicago, IN is not "Chicago, IN".
    expect(placeNamed('Chicago', 'IN')).toBeUndefined();
    expect(placeNamed('Springfield', 'MA')).toMatchObject({ city: 'Springfield', lat: 42.1015 });
  });

  it('among several matches, the most populous', () => {
    // Two places are named Juárez in Chihuahua: Ciudad Juárez (1.3 million) and a village.
    expect(placeNamed('Juarez', 'CH')).toMatchObject({ city: 'Juárez', lat: 31.7202, lon: -106.4608 });
    // Two places named Bel Air in Maryland: the county seat (10,190), not the one that comes
    // first in the file (1,258, further west).
    expect(placeNamed('Bel Air', 'MD')).toEqual({ city: 'Bel Air', state: 'MD', country: 'US', lat: 39.5359, lon: -76.3483 });
  });

  it("St. John's, NL is in Canada; NL is also Nuevo León, and no US state uses it", () => {
    expect(placeNamed("St. John's", 'NL')).toEqual({ city: "St. John's", state: 'NL', country: 'CA', lat: 47.5649, lon: -52.7093 });
    expect(placeNamed('Monterrey', 'NL')).toMatchObject({ city: 'Monterrey', state: 'NL', country: 'MX' });
    expect(placeNamed("St. John's", 'NL', 'US')).toBeUndefined();
    expect(placeNamed("St. John's", 'NL', 'MX')).toBeUndefined();
    expect(placeNamed("St. John's", 'NL', 'CA')).toMatchObject({ country: 'CA' });
    expect(placeNamed('Monterrey', 'NL', 'CA')).toBeUndefined();
  });

  it('a name in two countries under the same code: the most populous, unless the country is given', () => {
    // Delta, British Columbia (101,668) and Delta, Baja California (5,180).
    expect(placeNamed('Delta', 'BC')).toMatchObject({ city: 'Delta', state: 'BC', country: 'CA' });
    expect(placeNamed('Delta', 'BC', 'MX')).toMatchObject({ city: 'Delta', state: 'BC', country: 'MX', lat: 32.355 });
    // MO is Missouri and Morelos: each finds its own.
    expect(placeNamed('Springfield', 'MO')).toMatchObject({ country: 'US', lat: 37.2153 });
    expect(placeNamed('Cuernavaca', 'MO')).toMatchObject({ country: 'MX' });
  });

  it('undefined for an unknown name, a name in another state, and codes that are no state', () => {
    expect(placeNamed('Atlantis', 'IL')).toBeUndefined();
    expect(placeNamed('Chicago', 'WI')).toBeUndefined();
    expect(placeNamed('Chicago', 'ZZ')).toBeUndefined();
    expect(placeNamed('Chicago', 'Illinois')).toBeUndefined();
    expect(placeNamed('', 'IL')).toBeUndefined();
    expect(placeNamed(' . ', 'IL')).toBeUndefined();
    expect(placeNamed('Havana', '')).toBeUndefined();
    expect(placeNamed(undefined as unknown as string, 'IL')).toBeUndefined();
  });
});
