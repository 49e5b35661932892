import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT, cleanEnv } from './helpers.js';
import { NO_MOSQUITTO } from './sources/mosquitto.js';

// The bench asserts no timings; this only checks that `--quick --json` runs end to end and
// reports every figure (built by pretest into dist-bench/).
describe('npm run bench (quick)', () => {
  it('prints every figure as a finite positive number, and a PASS/MISS row per target', async () => {
    const child = spawn(process.execPath, [join(ROOT, 'dist-bench', 'bench', 'bench.js'), '--quick', '--json'], {
      cwd: ROOT,
      env: cleanEnv(),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 90_000);
    const code = await new Promise<number | null>((r) => child.on('close', (c) => r(c)));
    clearTimeout(timer);
    expect(code, stderr).toBe(0);

    const report = JSON.parse(stdout) as { quick: boolean; figures: Record<string, number>; rows: Array<{ id: string; value: string; pass: boolean | null }> };
    expect(report.quick).toBe(true);
    const figures = Object.entries(report.figures);
    expect(figures.length).toBeGreaterThan(20);
    for (const [name, value] of figures) {
      expect(typeof value, name).toBe('number');
      expect(Number.isFinite(value) && (value as number) > 0, `${name} = ${String(value)}`).toBe(true);
    }
    for (const id of ['1', '2a', '2b', '2c', '2e', '2f', '3a', '3b', '3c', '3e', '4', '8a', '8b', '8c', '10a', '10b']) {
      expect(typeof report.rows.find((r) => r.id === id)?.pass, `row ${id}`).toBe('boolean');
    }
    // Memory as an operator reads it: RSS, anonymous and file-backed, and the cgroup's view (3f).
    for (const name of ['rssIdle', 'rssPeak', 'rssAfter', 'rssPeakSmall', 'rssDaemon', 'cgroupUsage', 'cgroupAnon', 'cgroupFile']) {
      expect(report.figures, name).toHaveProperty(`${name}MB`);
      if (name.startsWith('rss')) for (const part of ['Anon', 'File']) expect(report.figures, name).toHaveProperty(`${name}${part}MB`);
    }
    expect(report.rows.find((r) => r.id === '3f')?.pass).toBeNull();
    // MQTT ingest against a real mosquitto (installed by .ci/run): no QoS 1 message lost.
    const mqtt = report.rows.filter((r) => r.id.startsWith('9'));
    expect(mqtt.map((r) => r.id)).toEqual(['9a', '9b']);
    if (NO_MOSQUITTO) expect(mqtt[0].value).toMatch(/^skipped \(mosquitto is not installed/);
    else {
      expect(mqtt[0], JSON.stringify(mqtt)).toMatchObject({ pass: true, value: `0 of ${report.figures.mqttPublished?.toLocaleString('en-US')}` });
      expect(report.figures.mqttStored).toBe(report.figures.mqttPublished);
    }
    // The full-disk rows mount a tmpfs: measured as root (CI), else each says why not.
    const fullDisk = report.rows.filter((r) => r.id.startsWith('7'));
    expect(fullDisk.map((r) => r.id)).toEqual(['7a', '7b', '7c']);
    const skipped = fullDisk[2].value.match(/^skipped \((.+)\)$/)?.[1];
    if (process.getuid?.() === 0 && !skipped?.startsWith('mount -t tmpfs failed')) {
      expect(typeof fullDisk[2].pass, JSON.stringify(fullDisk)).toBe('boolean');
      for (const name of ['fullDiskCpuPercent', 'fullDiskRssMB', 'fullDiskRssAnonMB', 'fullDiskRssFileMB', 'fullDiskFirst2xxS', 'fullDiskResumeS', 'fullDiskSigtermS'])
        expect(report.figures, name).toHaveProperty(name);
    } else {
      for (const r of fullDisk) expect(r.value, `row ${r.id}`).toMatch(/^skipped \(/);
      if (process.getuid?.() !== 0) expect(skipped).toBe('needs root to mount a tmpfs');
      expect(fullDisk[2].pass).toBeNull();
      expect(Object.keys(report.figures).filter((k) => k.startsWith('fullDisk'))).toEqual([]);
    }
  }, 100_000);
});
