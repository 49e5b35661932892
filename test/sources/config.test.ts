import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, parseConfigText } from '../../src/config/load.js';
import { ROOT } from '../helpers.js';

function problems(text: string): string[] {
  try {
    parseConfigText(`[api]\nscac = "ABCD"\n${text}`, 'agent.toml', '/etc/telematics-agent');
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    return (e as ConfigError).problems;
  }
  throw new Error('expected the config to be refused');
}

describe('source config', () => {
  it('fills the defaults of every source type from the schema', () => {
    const c = parseConfigText(
      `[api]
scac = "ABCD"
[[sources]]
type = "gpsd"
resource_id = "T1"
[[sources]]
type = "nmea"
resource_id = "T1"
device = "/dev/ttyUSB0"
[[sources]]
type = "onewire"
sensors = { "28-0316a2792aff" = "TRAILER-7" }
[[sources]]
type = "exec"
command = ["reefer-reader", "--port", "/dev/ttyS1"]
[[sources]]
type = "module"
path = "/opt/telematics/my-source.js"
`,
      'agent.toml',
      '/etc/telematics-agent',
    );
    expect(c.sources).toEqual([
      { type: 'gpsd', resource_id: 'T1', host: '127.0.0.1', port: 2947, no_data_timeout_s: 30, reconnect_initial_s: 1, reconnect_max_s: 60, max_line_bytes: 65536, odometer: 'gnss' },
      { type: 'nmea', resource_id: 'T1', device: '/dev/ttyUSB0', baud: 4800, no_data_timeout_s: 30, reopen_initial_s: 1, reopen_max_s: 60, max_line_bytes: 4096, odometer: 'gnss' },
      { type: 'onewire', sysfs_root: '/sys/bus/w1/devices', sensors: { '28-0316a2792aff': 'TRAILER-7' }, interval_s: 30, file: 'auto' },
      {
        type: 'exec',
        command: ['reefer-reader', '--port', '/dev/ttyS1'],
        env: {},
        max_line_bytes: 65536,
        restart_initial_s: 1,
        restart_max_s: 60,
        no_data_timeout_s: 0,
        stop_timeout_s: 5,
        odometer: 'none',
      },
      { type: 'module', path: '/opt/telematics/my-source.js', options: {}, odometer: 'none' },
    ]);
  });

  it('names each problem of a source by its path', () => {
    expect(
      problems(`[[sources]]
type = "gpsd"
resource_id = "T1"
port = 70000
reconnect_initial_s = 10
reconnect_max_s = 5
[[sources]]
type = "nmea"
resource_id = "T1"
device = "/dev/ttyUSB0"
baud = 1234
[[sources]]
type = "onewire"
sensors = { "28-XYZ" = "T1" }
[[sources]]
type = "exec"
command = []
max_line_bytes = 10
odometer = "gps"
[[sources]]
type = "module"
[[sources]]
type = "onewire"
sensors = { "28-0316a2792aff" = "TRAILER-7" }
odometer = "gnss"
`),
    ).toEqual([
      'sources[0].port: expected a number <= 65535, got 70000',
      'sources[0].reconnect_max_s: expected a number >= reconnect_initial_s',
      'sources[1].baud: expected a baud rate (1200, 2400, 4800, 9600, 19200, 38400, 57600, 115200, 230400, 460800, 921600), got 1234',
      'sources[2].sensors.28-XYZ: expected a 1-Wire id such as 28-0316a2792aff',
      'sources[3].command: expected the program and its arguments, e.g. ["reefer-reader", "--port", "/dev/ttyS1"]',
      'sources[3].max_line_bytes: expected a number >= 256, got 10',
      'sources[3].odometer: expected one of "gnss", "none", got "gps"',
      'sources[4].path: required (expected string)',
      'sources[5].odometer: unknown key',
    ]);
  });

  it('the example config shows a commented block for every source type', () => {
    const text = readFileSync(join(ROOT, 'config', 'agent.example.toml'), 'utf8');
    for (const type of ['gpsd', 'nmea', 'onewire', 'exec', 'mqtt', 'module']) expect(text).toContain(`# type = "${type}"`);
    // Uncommented, each block is valid (the file itself keeps only the simulator active).
    const blocks = text
      .slice(text.indexOf('# Other source types'))
      .split('\n')
      .filter((l) => /^# (\[\[sources\]\]|[a-z_]+ = )/.test(l))
      .map((l) => l.slice(2));
    const c = parseConfigText(`[api]\nscac = "ABCD"\n${blocks.join('\n')}\n`, 'agent.toml', '/etc/telematics-agent');
    expect(c.sources.map((s) => s.type)).toEqual(['gpsd', 'nmea', 'onewire', 'exec', 'mqtt', 'module']);
  });
});
