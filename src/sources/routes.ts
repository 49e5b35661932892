/**
 * Routes for the simulator: a built-in demo route, or a GPX, GeoJSON or CSV file.
 * Errors name the file and, where there is one, the line.
 */
import { readFileSync } from 'node:fs';
import { extname } from 'node:path';
import { AgentError } from '../errors.js';
import { EXIT } from '../exit.js';

export { distanceM } from '../geo/distance.js';

export interface RoutePoint {
  lat: number;
  lon: number;
}

/** The simulator's route cannot be read: `run` and `demo` end with it, as a run-time failure (exit 1). */
export class RouteError extends AgentError {
  readonly code = 'EROUTE';
  readonly exitCode = EXIT.FAILURE;
}

/**
 * Chicago, IL (pick-up, point 0) to Indianapolis, IN (delivery, the second-to-last point)
 * along I-94 and I-65, about 277 km, then on to a truck stop 3 km further.
 * It crosses from Central to Eastern time south of Rensselaer, so the demo shows the zone
 * of each trace point following the truck.
 */
const CHICAGO_INDIANAPOLIS: RoutePoint[] = [
  { lat: 41.847, lon: -87.647 },
  { lat: 41.818, lon: -87.63 },
  { lat: 41.734, lon: -87.556 },
  { lat: 41.68, lon: -87.507 },
  { lat: 41.603, lon: -87.337 },
  { lat: 41.52, lon: -87.3 },
  { lat: 41.43, lon: -87.33 },
  { lat: 41.17, lon: -87.26 },
  { lat: 40.95, lon: -87.15 },
  { lat: 40.76, lon: -87.04 },
  { lat: 40.45, lon: -86.92 },
  { lat: 40.28, lon: -86.65 },
  { lat: 40.05, lon: -86.45 },
  { lat: 39.9, lon: -86.27 },
  { lat: 39.79, lon: -86.18 },
  { lat: 39.768, lon: -86.158 },
  // On to a truck stop after unloading, so leaving the delivery stop is part of the route.
  { lat: 39.748, lon: -86.128 },
];

export const BUILTIN_ROUTES: Record<string, RoutePoint[]> = {
  'chicago-indianapolis': CHICAGO_INDIANAPOLIS,
};

function checkPoint(lat: number, lon: number, where: string): RoutePoint {
  if (!Number.isFinite(lat) || lat < -90 || lat > 90) throw new RouteError(`${where}: latitude out of range (${lat})`);
  if (!Number.isFinite(lon) || lon < -180 || lon > 180) throw new RouteError(`${where}: longitude out of range (${lon})`);
  return { lat, lon };
}

export function parseCsvRoute(text: string, file: string): RoutePoint[] {
  const points: RoutePoint[] = [];
  const lines = text.split(/\r?\n/);
  lines.forEach((line, i) => {
    const t = line.trim();
    if (!t || t.startsWith('#')) return;
    const [a, b] = t.split(/[,;\t]/).map((x) => x.trim());
    if (i === 0 && /[a-z]/i.test(a ?? '')) return; // header such as "lat,lon"
    points.push(checkPoint(Number(a), Number(b), `${file}:${i + 1}`));
  });
  return points;
}

export function parseGpxRoute(text: string, file: string): RoutePoint[] {
  const points: RoutePoint[] = [];
  const re = /<(?:trkpt|rtept|wpt)\b([^>]*)>/g;
  for (let m = re.exec(text); m; m = re.exec(text)) {
    const attrs = m[1];
    const lat = /\blat\s*=\s*["']([^"']+)["']/.exec(attrs)?.[1];
    const lon = /\blon\s*=\s*["']([^"']+)["']/.exec(attrs)?.[1];
    const line = text.slice(0, m.index).split('\n').length;
    points.push(checkPoint(Number(lat), Number(lon), `${file}:${line}`));
  }
  return points;
}

export function parseGeoJsonRoute(text: string, file: string): RoutePoint[] {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (err) {
    throw new RouteError(`${file}: ${(err as Error).message}`);
  }
  const coords: unknown[] = [];
  const visit = (g: unknown): void => {
    if (!g || typeof g !== 'object') return;
    const o = g as { type?: string; coordinates?: unknown; geometry?: unknown; features?: unknown[] };
    if (o.type === 'FeatureCollection') o.features?.forEach(visit);
    else if (o.type === 'Feature') visit(o.geometry);
    else if (o.type === 'LineString' && Array.isArray(o.coordinates)) coords.push(...o.coordinates);
    else if (o.type === 'MultiLineString' && Array.isArray(o.coordinates)) for (const l of o.coordinates) coords.push(...(l as unknown[]));
  };
  visit(doc);
  // GeoJSON is [longitude, latitude].
  return coords.map((c, i) => {
    const [lon, lat] = Array.isArray(c) ? (c as number[]) : [NaN, NaN];
    return checkPoint(Number(lat), Number(lon), `${file}: coordinate ${i}`);
  });
}

export function loadRoute(spec: string): RoutePoint[] {
  if (spec.startsWith('builtin:')) {
    const name = spec.slice('builtin:'.length);
    const r = BUILTIN_ROUTES[name];
    if (!r)
      throw new RouteError(
        `${spec}: unknown built-in route (known: ${Object.keys(BUILTIN_ROUTES)
          .map((k) => `builtin:${k}`)
          .join(', ')})`,
      );
    return r;
  }
  let text: string;
  try {
    text = readFileSync(spec, 'utf8');
  } catch (err) {
    throw new RouteError(`${spec}: cannot read route file (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
  }
  const ext = extname(spec).toLowerCase();
  const points = ext === '.gpx' ? parseGpxRoute(text, spec) : ext === '.json' || ext === '.geojson' ? parseGeoJsonRoute(text, spec) : parseCsvRoute(text, spec);
  if (points.length < 2) throw new RouteError(`${spec}: a route needs at least 2 points, found ${points.length}`);
  return points;
}

const rad = (d: number) => (d * Math.PI) / 180;

/** Initial bearing from a to b, degrees clockwise from north in [0, 360). */
export function bearingDeg(a: RoutePoint, b: RoutePoint): number {
  const y = Math.sin(rad(b.lon - a.lon)) * Math.cos(rad(b.lat));
  const x = Math.cos(rad(a.lat)) * Math.sin(rad(b.lat)) - Math.sin(rad(a.lat)) * Math.cos(rad(b.lat)) * Math.cos(rad(b.lon - a.lon));
  return ((Math.atan2(y, x) * 180) / Math.PI + 360) % 360;
}
