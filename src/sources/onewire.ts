/**
 * DS18B20 temperature sensors on the Linux 1-Wire bus (w1_therm), read from sysfs:
 * `<sysfs_root>/28-xxxxxxxxxxxx/w1_slave` (two lines; the first ends in `crc=.. YES` when the
 * scratchpad arrived intact) or, on newer kernels, `.../temperature` (millidegrees; empty
 * when the kernel's CRC check failed).
 *
 * Values refused as bad input: a failed CRC, a truncated or garbled file, 85000 (the
 * power-on value of the scratchpad: the conversion never ran, typically a sensor that lost
 * power in a cold trailer), an all-zero scratchpad (a shorted bus passes the CRC with zeros),
 * and anything outside the sensor's -55..125 C. The sensors have no clock: a reading is
 * stamped with the receive time, taken when the read returns (the conversion runs during it).
 */
import { open, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { OnewireSourceConfig } from '../config/schema.js';
import { preview, sourceHealth, timer } from './common.js';
import type { Source, SourceContext, SourceHealth } from './types.js';

export type W1Result = { ok: true; tempC: number } | { ok: false; reason: string };

/** No sysfs attribute of w1_therm is near this long; more is not a sensor talking. */
const MAX_FILE_BYTES = 4096;
const POWER_ON_MILLI = 85_000;
/** w1_therm families: DS18S20, DS1822, DS18B20, DS1825, DS28EA00. */
const THERMOMETER = /^(10|22|28|3b|42)-[0-9a-f]{12}$/;

function fromMilli(text: string): W1Result {
  if (!/^-?\d+$/.test(text)) return { ok: false, reason: `not a temperature: ${preview(text)}` };
  const milli = Number(text);
  if (milli === POWER_ON_MILLI) return { ok: false, reason: '85000: the power-on value (no conversion ran; sensor power?)' };
  const c = milli / 1000;
  if (c < -55 || c > 125) return { ok: false, reason: `${c} C is outside the sensor's range (-55..125 C)` };
  return { ok: true, tempC: c };
}

/** Parse the two lines of `w1_slave`. */
export function parseW1Slave(text: string): W1Result {
  const lines = text.split('\n').filter((l) => l.trim() !== '');
  if (lines.length < 2) return { ok: false, reason: `truncated w1_slave (${lines.length} of 2 lines): ${preview(text)}` };
  const crc = /^((?:[0-9a-f]{2} ){9}): crc=[0-9a-f]{2} (YES|NO)$/.exec(lines[0].trim());
  if (!crc) return { ok: false, reason: `garbled w1_slave CRC line: ${preview(lines[0])}` };
  if (crc[2] !== 'YES') return { ok: false, reason: 'CRC check failed (NO)' };
  if (/^(00 ){9}$/.test(crc[1])) return { ok: false, reason: 'all-zero scratchpad (bus fault)' };
  const t = /^(?:[0-9a-f]{2} ){9}t=(\S*)$/.exec(lines[1].trim());
  if (!t) return { ok: false, reason: `garbled w1_slave temperature line: ${preview(lines[1])}` };
  return fromMilli(t[1]);
}

/** Parse the `temperature` attribute. */
export function parseTemperatureFile(text: string): W1Result {
  const v = text.trim();
  if (v === '') return { ok: false, reason: 'empty read (the kernel found a CRC error, or the sensor is gone)' };
  return fromMilli(v);
}

/** Read at most MAX_FILE_BYTES (+1, to know it was longer). */
async function readSmall(path: string): Promise<string> {
  const fh = await open(path, 'r');
  try {
    const buf = Buffer.alloc(MAX_FILE_BYTES + 1);
    const { bytesRead } = await fh.read(buf, 0, buf.length, 0);
    if (bytesRead > MAX_FILE_BYTES) throw Object.assign(new Error(`longer than ${MAX_FILE_BYTES} bytes`), { code: 'ETOOLONG' });
    return buf.subarray(0, bytesRead).toString('utf8');
  } finally {
    await fh.close();
  }
}

interface SensorState {
  resourceId: string;
  /** Why the last read gave no reading (undefined: it gave one). */
  problem?: string;
  missing: boolean;
}

export class OnewireSource implements Source {
  readonly type = 'onewire';
  readonly name: string;
  private readonly sensors: Map<string, SensorState>;
  private timer: NodeJS.Timeout | undefined;
  private polling: Promise<void> | undefined;
  private running = false;
  private polls = 0;
  private unmapped = new Set<string>();
  private readonly counters = { polls: 0, readErrors: 0, missing: 0 };

  constructor(
    private readonly cfg: OnewireSourceConfig,
    private readonly ctx: SourceContext,
  ) {
    this.name = cfg.name ?? `onewire:${[...new Set(Object.values(cfg.sensors))].sort().join(',')}`;
    this.sensors = new Map(Object.entries(cfg.sensors).map(([id, resourceId]) => [id, { resourceId, missing: false }]));
  }

  async start(): Promise<void> {
    if (this.running) return;
    this.running = true;
    this.ctx.log.info({ root: this.cfg.sysfs_root, sensors: this.sensors.size, intervalS: this.cfg.interval_s }, 'reading 1-Wire sensors');
    this.schedule(0);
  }

  async stop(): Promise<void> {
    this.running = false;
    clearTimeout(this.timer);
    this.timer = undefined;
    // A read in progress finishes (a sysfs read cannot be interrupted; it takes < 1 s a sensor).
    await this.polling;
  }

  health(): SourceHealth & { counters: Record<string, number> } {
    const bad = [...this.sensors].filter(([, s]) => s.problem !== undefined);
    let detail: string;
    if (!this.running) detail = 'stopped';
    else if (this.polls === 0) detail = `${this.sensors.size} sensors, first read pending`;
    else if (bad.length === 0) detail = `${this.sensors.size} sensors read every ${this.cfg.interval_s} s`;
    else detail = bad.map(([id, s]) => `${id} (${s.resourceId}): ${s.problem}`).join('; ');
    if (this.unmapped.size) detail += `; ${this.unmapped.size} sensors present but not in sensors: ${[...this.unmapped].join(', ')}`;
    return sourceHealth(this.ctx, { healthy: this.running && bad.length === 0, detail }, this.counters);
  }

  /** Read every configured sensor once. */
  private async pollOnce(): Promise<void> {
    this.polls += 1;
    this.counters.polls += 1;
    for (const [id, state] of this.sensors) {
      if (!this.running) return;
      await this.readSensor(id, state);
    }
    await this.findUnmapped();
  }

  private schedule(ms: number): void {
    if (!this.running) return;
    this.timer = timer(() => {
      this.timer = undefined;
      this.polling = this.pollOnce()
        .catch((err) => this.ctx.log.error({ err: (err as Error).message }, '1-Wire poll failed'))
        .finally(() => {
          this.polling = undefined;
          this.schedule(this.cfg.interval_s * 1000);
        });
    }, ms);
  }

  private async readSensor(id: string, state: SensorState): Promise<void> {
    const dir = join(this.cfg.sysfs_root, id);
    const files = this.cfg.file === 'auto' ? ['w1_slave', 'temperature'] : [this.cfg.file];
    let text: string | undefined;
    let file = files[0];
    let error: NodeJS.ErrnoException | undefined;
    for (const f of files) {
      try {
        text = await readSmall(join(dir, f));
        file = f;
        break;
      } catch (err) {
        error = err as NodeJS.ErrnoException;
        if (error.code !== 'ENOENT') break;
      }
    }
    const timeMs = Date.now();
    if (text === undefined) {
      if (error?.code === 'ENOENT') {
        this.counters.missing += 1;
        if (!state.missing) this.ctx.log.warn({ sensor: id, resourceId: state.resourceId, root: this.cfg.sysfs_root }, '1-Wire sensor not present');
        state.missing = true;
        state.problem = 'not present';
      } else if (error?.code === 'ETOOLONG') {
        state.problem = `${file}: longer than ${MAX_FILE_BYTES} bytes`;
        this.ctx.reject(`${id}: ${state.problem}`);
      } else {
        this.counters.readErrors += 1;
        state.problem = `read failed: ${error?.code ?? error?.message}`;
        this.ctx.log.debug({ sensor: id, err: error?.message }, '1-Wire read failed');
      }
      return;
    }
    if (state.missing) this.ctx.log.info({ sensor: id, resourceId: state.resourceId }, '1-Wire sensor present again');
    state.missing = false;
    const r = file === 'w1_slave' ? parseW1Slave(text) : parseTemperatureFile(text);
    if (!r.ok) {
      state.problem = r.reason;
      this.ctx.reject(`${id}: ${r.reason}`);
      return;
    }
    state.problem = undefined;
    this.ctx.emit({ resourceId: state.resourceId, timeMs, temperatureC: r.tempC });
  }

  /** Sensors on the bus that the config does not name: listed in health, logged once each. */
  private async findUnmapped(): Promise<void> {
    let names: string[];
    try {
      names = await readdir(this.cfg.sysfs_root);
    } catch {
      return;
    }
    for (const n of names) {
      if (THERMOMETER.test(n) && !this.sensors.has(n) && !this.unmapped.has(n)) {
        this.unmapped.add(n);
        this.ctx.log.info({ sensor: n }, '1-Wire sensor present but not configured; ignored (add it to sensors to read it)');
      }
    }
  }
}
