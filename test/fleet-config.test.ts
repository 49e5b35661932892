/** The [fleet] table: defaults, and what it refuses, word for word. */
import { describe, expect, it } from 'vitest';
import { configSchema } from '../src/config/schema.js';
import { check, problemLine } from '../src/validation.js';

const base = { api: { scac: 'ABCD' }, sources: [{ type: 'module', path: '/x.mjs' }] };
const problems = (fleet: Record<string, unknown>, extra: Record<string, unknown> = {}) => {
  const r = check(configSchema, { ...base, ...extra, fleet });
  return r.success ? [] : r.problems.map(problemLine);
};

describe('[fleet] config', () => {
  it('is off without the table, and has the issue’s defaults with it', () => {
    expect(configSchema.parse(base).fleet).toBeUndefined();
    expect(configSchema.parse({ ...base, fleet: { url: 'mqtts://broker.example.com:8883' } }).fleet).toEqual({
      url: 'mqtts://broker.example.com:8883',
      status_interval_s: 300,
      keepalive_s: 60,
      commands: true,
      max_command_bytes: 65_536,
      allow_plaintext: false,
      protocol_version: 5,
    });
  });

  it('refuses plain mqtt:// or ws:// to a host other than loopback unless allow_plaintext', () => {
    expect(problems({ url: 'mqtt://broker.example.com' })).toEqual([
      'fleet.url: a plain mqtt:// connection to broker.example.com would carry the password and every load in clear: use mqtts:// or wss://, or set fleet.allow_plaintext = true',
    ]);
    expect(problems({ url: 'ws://10.0.0.5:9001' })[0]).toContain('a plain ws:// connection to 10.0.0.5');
    expect(problems({ url: 'mqtt://broker.example.com', allow_plaintext: true })).toEqual([]);
    expect(problems({ url: 'mqtt://127.0.0.1:1883' })).toEqual([]);
    expect(problems({ url: 'mqtt://[::1]:1883' })).toEqual([]);
    expect(problems({ url: 'wss://broker.example.com/mqtt' })).toEqual([]);
  });

  it('names each wrong setting', () => {
    expect(problems({ url: 'https://x', status_interval_s: 1, password_file: '/p', cert_file: '/c', topic_prefix: 'fleet/+/x' })).toEqual([
      'fleet.url: expected mqtt://, mqtts://, ws:// or wss://, not https://, got "https://x"',
      'fleet.topic_prefix: expected a topic without + or # wildcards, got "fleet/+/x"',
      'fleet.status_interval_s: expected a number >= 5, got 1',
      'fleet.username: expected a user name with password_file',
      'fleet.key_file: cert_file and key_file go together',
    ]);
  });

  it('refuses a device_id with an MQTT wildcard when the topics are named after it (the broker closed the link, saying nothing)', () => {
    expect(problems({ url: 'mqtts://b.example.com' }, { device_id: 'truck+7' })).toEqual([
      'device_id: expected no + or # with [fleet] and no fleet.topic_prefix: the link\'s topics are fleet/<device_id>, got "truck+7"',
    ]);
    expect(problems({ url: 'mqtts://b.example.com' }, { device_id: 'truck#7' })).toHaveLength(1);
    expect(problems({ url: 'mqtts://b.example.com', topic_prefix: 'fleet/truck-7' }, { device_id: 'truck+7' })).toEqual([]);
    expect(problems({ url: 'mqtts://b.example.com' }, { device_id: 'truck-7' })).toEqual([]);
  });

  it('refuses the client id of an MQTT source (the broker keeps one session per client id)', () => {
    const mqttSource = { type: 'mqtt', url: 'mqtt://127.0.0.1:1883', topics: ['depot/#'] };
    expect(problems({ url: 'mqtts://b.example.com' }, { sources: [mqttSource] })).toEqual([
      'fleet.client_id: the same client id as an MQTT source: give the fleet link a client_id of its own (the broker keeps one session per client id)',
    ]);
    expect(problems({ url: 'mqtts://b.example.com', client_id: 'truck-7-fleet' }, { sources: [mqttSource] })).toEqual([]);
  });
});

describe('docs/fleet.md', () => {
  it('holds the JSON Schemas generated from the zod schemas, and the ACL the tests use', async () => {
    const { readFileSync } = await import('node:fs');
    const { jsonSchemas } = await import('../src/fleet/messages.js');
    const { FLEET_ACL } = await import('./fleet-acl.js');
    const doc = readFileSync(new URL('../docs/fleet.md', import.meta.url), 'utf8');
    for (const [name, schema] of Object.entries(jsonSchemas())) expect(doc, name).toContain(`### \`${name}\`\n\n\`\`\`json\n${JSON.stringify(schema, null, 2)}\n\`\`\``);
    expect(doc).toContain(FLEET_ACL);
  });
});
