import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { packageFile, packageVersion } from '../src/paths.js';
import { ROOT } from './helpers.js';

describe('files shipped with the package', () => {
  it('are found from the package root', () => {
    expect(packageFile('data', 'places-na.bin')).toBe(join(ROOT, 'data', 'places-na.bin'));
    expect(existsSync(packageFile('systemd', 'telematics-agent.service'))).toBe(true);
    expect(packageVersion()).toBe((JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version);
  });
});
