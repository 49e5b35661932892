import { describe, expect, it } from 'vitest';
import { runCli } from './helpers.js';

describe('demo', () => {
  it('runs sandbox and agent in one process and ends with a summary that checks nothing was lost', async () => {
    const r = await runCli(['demo', '--time-scale', '2000'], { timeoutMs: 90_000 });
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    // One truck, two loads: each its own milestones, the shared Indianapolis dock included...
    expect(r.stdout).toContain('milestones DEMO-LOAD-1  AB X3 AF X1 D1 (in order)');
    // The first milestone line shows AB: what it is is said before it.
    const firstMilestone = r.stdout.indexOf('milestone 200');
    expect(r.stdout.indexOf('AB: the delivery appointment, recorded by hand')).toBeGreaterThan(-1);
    expect(r.stdout.indexOf('AB: the delivery appointment, recorded by hand')).toBeLessThan(firstMilestone);
    expect(r.stdout).toContain('milestones DEMO-LOAD-2  X3 AF X1 D1 (in order)');
    expect(r.stdout).toContain('DEMO-LOAD-2 started on TRUCK-DEMO in Lafayette, IN; DEMO-LOAD-1 stays on');
    expect(r.stdout).toMatch(/trace requests\s+\d+ accepted/);
    // ...and its own traces: the second's from Lafayette on only, fewer points than the first's.
    const points = (load: string) => Number(new RegExp(`\\n {4}${load} +\\d+ requests, (\\d+) points\\n`).exec(r.stdout)?.[1]);
    expect(points('DEMO-LOAD-2')).toBeGreaterThan(0);
    expect(points('DEMO-LOAD-1')).toBeGreaterThan(points('DEMO-LOAD-2'));
    expect(r.stdout).toMatch(/faults injected\s+2 x 503, all retried/);
    expect(r.stdout).toContain('left in buffer          0 readings, 0 milestones (all delivered)');
    expect(r.stdout).toMatch(/demo ok\n$/);
  }, 100_000);
});
