/** NMEA 0183 sentences as a receiver prints them, for the tests that feed a real gpsd or the nmea source. */
const cs = (body: string) => {
  let c = 0;
  for (const ch of body) c ^= ch.charCodeAt(0);
  return `$${body}*${c.toString(16).toUpperCase().padStart(2, '0')}`;
};
const two = (n: number) => String(n).padStart(2, '0');
const hms = (d: Date) => `${two(d.getUTCHours())}${two(d.getUTCMinutes())}${two(d.getUTCSeconds())}.00`;
const dmy = (d: Date) => `${two(d.getUTCDate())}${two(d.getUTCMonth() + 1)}${two(d.getUTCFullYear() % 100)}`;
const dm = (v: number, degDigits: number, pos: string, neg: string) => {
  const a = Math.abs(v);
  const d = Math.floor(a);
  return `${String(d).padStart(degDigits, '0')}${((a - d) * 60).toFixed(5).padStart(8, '0')},${v >= 0 ? pos : neg}`;
};

/** `epochs` seconds of driving south of Chicago, stamped from `t0` (whole seconds), one GGA and RMC each. */
export function nmeaFrom(t0: number, epochs = 12): { text: string; times: number[] } {
  const lines: string[] = [];
  const times: number[] = [];
  for (let i = 0; i < epochs; i++) {
    const d = new Date(t0 + i * 1000);
    const lat = 41.6 - i * 0.0002;
    const lon = -87.6;
    lines.push(cs(`GPGGA,${hms(d)},${dm(lat, 2, 'N', 'S')},${dm(lon, 3, 'E', 'W')},1,09,0.9,180.0,M,-33.9,M,,`));
    lines.push(cs(`GPRMC,${hms(d)},A,${dm(lat, 2, 'N', 'S')},${dm(lon, 3, 'E', 'W')},43.0,180.0,${dmy(d)},,,A`));
    times.push(t0 + i * 1000);
  }
  return { text: `${lines.join('\r\n')}\r\n`, times };
}
