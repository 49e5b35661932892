import { describe, expect, it } from 'vitest';
import { runCli } from './helpers.js';

describe('demo', () => {
  it('runs sandbox and agent in one process and ends with a summary that checks nothing was lost', async () => {
    const r = await runCli(['demo', '--time-scale', '2000'], { timeoutMs: 90_000 });
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('milestones              AB X3 AF X1 D1 (in order)');
    expect(r.stdout).toMatch(/trace requests\s+\d+ accepted/);
    expect(r.stdout).toMatch(/faults injected\s+2 x 503, all retried/);
    expect(r.stdout).toContain('left in buffer          0 readings, 0 milestones (all delivered)');
    expect(r.stdout).toMatch(/demo ok\n$/);
  }, 100_000);
});
