import { mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import { onewireSourceSchema } from '../../src/config/schema.js';
import { OnewireSource, parseTemperatureFile, parseW1Slave } from '../../src/sources/onewire.js';
import { tempFixture, waitFor } from '../helpers.js';
import { activeResources, recorder, sleep } from './support.js';

const A = '28-0316a2792aff';
const B = '28-0417b3803b00';
const C = '28-05000000c0de';

/** w1_slave as the kernel writes it: scratchpad bytes, CRC verdict, then the temperature. */
const w1 = (milli: number, verdict = 'YES', bytes = '50 05 4b 46 7f ff 0c 10 1c') => `${bytes} : crc=1c ${verdict}\n${bytes} t=${milli}\n`;

const tree = tempFixture('ta-w1-');
beforeEach(() => {
  mkdirSync(join(tree.dir, 'w1_bus_master1'));
});

function sensor(id: string, file: 'w1_slave' | 'temperature', text: string | Buffer): void {
  mkdirSync(join(tree.dir, id), { recursive: true });
  writeFileSync(join(tree.dir, id, file), text);
}

/** Swap a sensor's w1_slave at once (rename), so a poll never sees half a file. */
function replace(id: string, text: string | Buffer): void {
  writeFileSync(join(tree.dir, id, 'w1_slave.new'), text);
  renameSync(join(tree.dir, id, 'w1_slave.new'), join(tree.dir, id, 'w1_slave'));
}

const cfg = (extra: Record<string, unknown> = {}) => onewireSourceSchema.parse({ type: 'onewire', sysfs_root: tree.dir, interval_s: 0.05, sensors: { [A]: 'TRAILER-1', [B]: 'TRAILER-2' }, ...extra });

describe('1-Wire parsing', () => {
  it('reads w1_slave only when the CRC line says YES', () => {
    expect(parseW1Slave(w1(-18125))).toEqual({ ok: true, tempC: -18.125 });
    expect(parseW1Slave(w1(-18125, 'NO'))).toEqual({ ok: false, reason: 'CRC check failed (NO)' });
    expect(parseW1Slave(w1(85000))).toEqual({ ok: false, reason: '85000: the power-on value (no conversion ran; sensor power?)' });
    expect(parseW1Slave(w1(0, 'YES', '00 00 00 00 00 00 00 00 00'))).toEqual({ ok: false, reason: 'all-zero scratchpad (bus fault)' });
    expect(parseW1Slave(w1(130000))).toEqual({ ok: false, reason: "130 C is outside the sensor's range (-55..125 C)" });
    expect(parseW1Slave('50 05 4b 46 7f ff 0c 10 1c : crc=1c YES\n')).toMatchObject({ ok: false, reason: expect.stringContaining('truncated w1_slave (1 of 2 lines)') });
    expect(parseW1Slave('50 05 4b 46 7f ff 0c 10 1c : crc=1c YES\n50 05 4b 46 7f ff 0c 10 1c t=NaN\n')).toMatchObject({ ok: false, reason: 'not a temperature: "NaN"' });
    expect(parseW1Slave('\u0000\u00ff garbage\n\u0001\n')).toMatchObject({ ok: false, reason: expect.stringContaining('garbled w1_slave CRC line') });
  });

  it('reads the temperature attribute, where an empty read means the kernel saw a bad CRC', () => {
    expect(parseTemperatureFile('4250\n')).toEqual({ ok: true, tempC: 4.25 });
    expect(parseTemperatureFile('-55000\n')).toEqual({ ok: true, tempC: -55 });
    expect(parseTemperatureFile('')).toMatchObject({ ok: false, reason: expect.stringContaining('empty read') });
    expect(parseTemperatureFile('85000\n')).toMatchObject({ ok: false, reason: expect.stringContaining('power-on value') });
    expect(parseTemperatureFile('12.5\n')).toMatchObject({ ok: false, reason: 'not a temperature: "12.5"' });
  });
});

describe('1-Wire source on a fake sysfs tree', () => {
  it('maps sensor ids to resources and stamps readings with the receive time', async () => {
    sensor(A, 'w1_slave', w1(-18125));
    sensor(B, 'temperature', '3500\n'); // a newer kernel: no w1_slave
    sensor(C, 'w1_slave', w1(20000)); // on the bus, not in the config
    const rec = recorder();
    const src = new OnewireSource(cfg(), rec.ctx);
    const t0 = Date.now();
    await src.start();
    await waitFor(() => rec.readings.length >= 4, 5000, 'two polls');
    await src.stop();
    expect(rec.readings.slice(0, 2)).toEqual([
      { resourceId: 'TRAILER-1', timeMs: expect.any(Number), temperatureC: -18.125 },
      { resourceId: 'TRAILER-2', timeMs: expect.any(Number), temperatureC: 3.5 },
    ]);
    for (const r of rec.readings) expect(r.timeMs).toBeGreaterThanOrEqual(t0);
    expect(rec.readings.some((r) => r.resourceId === 'TRAILER-3' || r.temperatureC === 20)).toBe(false);
    const h = src.health();
    expect(h.rejected).toBe(0);
    expect(rec.logs.filter((l) => l.msg.startsWith('1-Wire sensor present but not configured'))).toHaveLength(1);
    expect(rec.logs.find((l) => l.msg.startsWith('1-Wire sensor present but not configured'))?.sensor).toBe(C);
  });

  it('rejects and counts a bad CRC, 85000, garbage, NaN, truncated and huge files, and recovers', async () => {
    const rec = recorder();
    const src = new OnewireSource(cfg({ interval_s: 0.03, sensors: { [A]: 'TRAILER-1' } }), rec.ctx);
    const bad: Array<[string | Buffer, string]> = [
      [w1(-18125, 'NO'), `${A}: CRC check failed (NO)`],
      [w1(85000), `${A}: 85000: the power-on value (no conversion ran; sensor power?)`],
      [Buffer.from([0x00, 0xff, 0x0a, 0x80, 0x0a]), `${A}: garbled w1_slave CRC line: "\\u0000\ufffd"`],
      ['50 05 4b 46 7f ff 0c 10 1c : crc=1c YES\n50 05 4b 46 7f ff 0c 10 1c t=NaN\n', `${A}: not a temperature: "NaN"`],
      ['50 05 4b 46 7f ff 0c 10 1c : crc=1c YES\n50 05 4b', `${A}: garbled w1_slave temperature line: "50 05 4b"`],
      [Buffer.alloc(10 * 1_048_576, 0x37), `${A}: w1_slave: longer than 4096 bytes`],
    ];
    sensor(A, 'w1_slave', bad[0][0]);
    await src.start();
    for (const [text, reason] of bad) {
      replace(A, text);
      await waitFor(() => rec.rejects.includes(reason), 3000, reason);
      expect(src.health()).toMatchObject({ healthy: false, detail: `${A} (TRAILER-1): ${reason.slice(A.length + 2)}` });
    }
    replace(A, w1(-17500));
    await waitFor(() => rec.readings.length >= 1, 3000, 'a good read after the bad ones');
    await src.stop();
    // Each bad file was read at least once (the poll may see one twice before it is replaced).
    expect([...new Set(rec.rejects)]).toEqual(bad.map(([, reason]) => reason));
    expect(rec.readings[0]).toMatchObject({ resourceId: 'TRAILER-1', temperatureC: -17.5 });
    expect(src.health()).toMatchObject({ rejected: rec.rejects.length, readings: rec.readings.length });
  });

  it('reports a configured sensor that is not on the bus, and its return', async () => {
    sensor(A, 'w1_slave', w1(-18125));
    const rec = recorder();
    const src = new OnewireSource(cfg(), rec.ctx);
    await src.start();
    await waitFor(() => src.health().counters.polls >= 2, 3000, 'two polls');
    expect(src.health()).toMatchObject({ healthy: false, detail: `${B} (TRAILER-2): not present` });
    expect(rec.logs.filter((l) => l.msg === '1-Wire sensor not present')).toHaveLength(1); // once, not every poll
    sensor(B, 'w1_slave', w1(2000));
    await waitFor(() => rec.readings.some((r) => r.resourceId === 'TRAILER-2'), 3000, 'the sensor back');
    await waitFor(() => src.health().healthy, 3000, 'healthy');
    expect(src.health().detail).toBe('2 sensors read every 0.05 s');
    rmSync(join(tree.dir, A), { recursive: true });
    await waitFor(() => !src.health().healthy, 3000, 'unhealthy again');
    await src.stop();
  });

  it('stop() waits for the read in progress and leaves no timer', async () => {
    sensor(A, 'w1_slave', w1(1000));
    sensor(B, 'w1_slave', w1(2000));
    const before = activeResources().Timeout ?? 0;
    const rec = recorder();
    const src = new OnewireSource(cfg({ interval_s: 0.01 }), rec.ctx);
    await src.start();
    await waitFor(() => rec.readings.length >= 10, 3000, 'readings');
    await src.stop();
    const n = rec.readings.length;
    await sleep(100);
    expect(rec.readings.length).toBe(n);
    expect(activeResources().Timeout ?? 0).toBeLessThanOrEqual(before);
    expect(src.health()).toMatchObject({ healthy: false, detail: 'stopped' });
  });

  it('refuses a config without sensors or with a malformed id', () => {
    const r = onewireSourceSchema.safeParse({ type: 'onewire', sensors: { 'not-an-id': 'T1' } });
    expect(r.success).toBe(false);
    expect(r.error!.issues.map((i) => i.message)).toContain('expected a 1-Wire id such as 28-0316a2792aff');
    expect(onewireSourceSchema.safeParse({ type: 'onewire', sensors: {} }).error!.issues[0].message).toContain('expected at least one sensor');
  });
});
