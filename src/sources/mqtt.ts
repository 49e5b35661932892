/**
 * MQTT: readings published to a broker by depot gateways and sensor hubs (BLE temperature
 * gateways, telematics boxes), one subscription instead of an exec adapter per device.
 *
 * A message is one JSON reading in the exec line format, or an array of them; `fields` renames
 * what a gateway calls them, and `resource_from_topic` takes the resource id from a level of
 * the topic (one topic per trailer). A message that is not JSON, too large or invalid is
 * counted by reason and logged; the source goes on with the next one.
 *
 * The connection is MQTT.js's, with the reconnecting done here: MQTT.js retries at a fixed
 * period, and a broker that is away for a day should not be knocked on every second. With
 * QoS 1 and `clean = false` (the defaults) the broker keeps the session under the client id:
 * messages published while the agent is down or reconnecting are handed over when it is back.
 */
import { readFileSync } from 'node:fs';
import { connect, type IClientOptions, type MqttClient } from 'mqtt';
import { Backoff } from '../backoff.js';
import type { MqttSourceConfig } from '../config/schema.js';
import { defaultDeviceId, mqttClientId } from '../config/load.js';
import { addSecret } from '../log.js';
import { AttemptLog, preview, sourceHealth, timer } from './common.js';
import type { Reading, Source, SourceContext, SourceHealth } from './types.js';

type Json = Record<string, unknown>;

/** Why a message, or one reading of it, was refused: the counters `status` shows. */
export type MqttRejectReason = 'tooLarge' | 'notJson' | 'invalid';

export interface MqttMapping {
  /** Reading field -> name in the payload (dotted: inside an object). */
  fields: Record<string, string>;
  /** The topic level (from 1) that is the resource id. */
  resourceFromTopic?: number;
  temperatureUnit: 'C' | 'F';
  maxMessageBytes: number;
}

export interface DecodedMessage {
  /** Readings in good form, each with where it came from (for admission's log line). */
  readings: Array<{ reading: Reading; where: string }>;
  /** One per refused message or reading, with its reason. */
  problems: Array<{ reason: MqttRejectReason; text: string }>;
}

/** Epoch numbers below this are seconds (1e11 s is the year 5138; 1e11 ms is 1973). */
const SECONDS_BELOW = 1e11;
const ISO_WITH_ZONE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})$/i;

/** A payload's value at a field's name: own properties only, a dotted name walks into objects. */
function valueAt(obj: Json, name: string): unknown {
  let v: unknown = obj;
  for (const part of name.split('.')) {
    if (typeof v !== 'object' || v === null || Array.isArray(v) || !Object.hasOwn(v, part)) return undefined;
    v = (v as Json)[part];
  }
  return v;
}

/** Turns MQTT messages into readings: pure, so every rule is tested without a broker. */
export class MqttDecoder {
  constructor(private readonly m: MqttMapping) {}

  decode(topic: string, payload: Buffer, nowMs: number): DecodedMessage {
    const out: DecodedMessage = { readings: [], problems: [] };
    if (payload.length > this.m.maxMessageBytes) {
      out.problems.push({ reason: 'tooLarge', text: `topic ${topic}: message of ${payload.length} bytes, more than max_message_bytes (${this.m.maxMessageBytes}); dropped` });
      return out;
    }
    const text = payload.toString('utf8');
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      out.problems.push({ reason: 'notJson', text: `topic ${topic}: not JSON: ${preview(text)}` });
      return out;
    }
    const items = Array.isArray(json) ? json : [json];
    if (items.length === 0) out.problems.push({ reason: 'invalid', text: `topic ${topic}: an empty array, no reading` });
    items.forEach((item, i) => {
      const where = Array.isArray(json) ? `topic ${topic} [${i}]` : `topic ${topic}`;
      const r = this.reading(topic, item, nowMs);
      if (typeof r === 'string') out.problems.push({ reason: 'invalid', text: `${where}: ${r}` });
      else out.readings.push({ reading: r, where });
    });
    return out;
  }

  /** One reading, or why not (naming the field as the payload calls it). */
  private reading(topic: string, item: unknown, nowMs: number): Reading | string {
    if (typeof item !== 'object' || item === null || Array.isArray(item)) return `expected a JSON object (a reading), got ${Array.isArray(item) ? 'an array' : item === null ? 'null' : typeof item}`;
    const obj = item as Json;
    const name = (field: string) => this.m.fields[field] ?? field;
    const get = (field: string) => {
      const v = valueAt(obj, name(field));
      return v === null ? undefined : v;
    };
    const num = (field: string): number | undefined | string => {
      const v = get(field);
      if (v === undefined) return undefined;
      if (typeof v === 'number') return Number.isFinite(v) ? v : `${name(field)}: expected a finite number`;
      return `${name(field)}: expected a number, got ${preview(JSON.stringify(v) ?? String(v), 30)}`;
    };

    let resourceId: string;
    if (this.m.resourceFromTopic !== undefined) {
      const level = topic.split('/')[this.m.resourceFromTopic - 1];
      if (!level) return `topic ${JSON.stringify(topic)} has no level ${this.m.resourceFromTopic} (resource_from_topic)`;
      resourceId = level;
    } else {
      const v = get('resourceId');
      if (typeof v === 'number' && Number.isSafeInteger(v)) resourceId = String(v);
      else if (typeof v === 'string') resourceId = v;
      else return v === undefined ? `${name('resourceId')}: missing (or set resource_from_topic)` : `${name('resourceId')}: expected a string`;
    }
    if (resourceId.length === 0 || resourceId.length > 64) return `${this.m.resourceFromTopic !== undefined ? 'resource id from the topic' : name('resourceId')}: expected 1 to 64 characters`;

    const time = get('time');
    let timeMs: number;
    if (time === undefined) timeMs = nowMs;
    else if (typeof time === 'number' && Number.isFinite(time) && time > 0) timeMs = Math.round(time < SECONDS_BELOW ? time * 1000 : time);
    else if (typeof time === 'string' && ISO_WITH_ZONE.test(time) && Number.isFinite(Date.parse(time))) timeMs = Date.parse(time);
    else return `${name('time')}: expected an ISO 8601 time with Z or an offset, or epoch seconds or milliseconds, got ${preview(JSON.stringify(time) ?? String(time), 40)}`;

    const values: Record<string, number | undefined> = {};
    for (const field of ['latitude', 'longitude', 'speed', 'heading', 'odometer', 'temperature']) {
      const v = num(field);
      if (typeof v === 'string') return v;
      values[field] = v;
    }
    const unit = get('temperatureUnit') ?? this.m.temperatureUnit;
    if (unit !== 'C' && unit !== 'F') return `${name('temperatureUnit')}: expected "C" or "F"`;
    const t = values.temperature;
    return {
      resourceId,
      timeMs,
      lat: values.latitude,
      lon: values.longitude,
      speed: values.speed,
      heading: values.heading,
      odometer: values.odometer,
      temperatureC: t === undefined ? undefined : unit === 'F' ? Math.round(((t - 32) / 1.8) * 1000) / 1000 : t,
    };
  }
}

/** What the log and `status` call the broker: the URL without any user name in it. */
function brokerName(url: string): string {
  try {
    const u = new URL(url);
    u.username = '';
    u.password = '';
    return u.href.replace(/\/$/, '');
  } catch {
    return url;
  }
}

/** An MQTT.js error in words: the errno code of a socket, or the broker's refusal. */
function describe(err: Error & { code?: string | number }): string {
  if (typeof err.code === 'string' && /^E[A-Z]+$/.test(err.code)) return `${err.code} (${err.message})`;
  return err.message;
}

export class MqttSource implements Source {
  readonly type = 'mqtt';
  readonly name: string;
  private readonly decoder: MqttDecoder;
  private readonly backoff: Backoff;
  private readonly attempts: AttemptLog;
  private readonly broker: string;
  private client: MqttClient | undefined;
  private active = false;
  private connected = false;
  private retryTimer: NodeJS.Timeout | undefined;
  private lastError: string | undefined;
  private lastMessageMs: number | undefined;
  private connectedAtMs = 0;
  readonly counters = { messages: 0, tooLarge: 0, notJson: 0, invalid: 0, connects: 0, connectFailures: 0 };

  constructor(
    private readonly cfg: MqttSourceConfig,
    private readonly ctx: SourceContext,
  ) {
    this.broker = brokerName(cfg.url);
    this.name = cfg.name ?? `mqtt:${new URL(cfg.url).host}`;
    this.decoder = new MqttDecoder({ fields: cfg.fields, resourceFromTopic: cfg.resource_from_topic, temperatureUnit: cfg.temperature_unit, maxMessageBytes: cfg.max_message_bytes });
    this.backoff = new Backoff({ initialMs: cfg.reconnect_initial_s * 1000, maxMs: cfg.reconnect_max_s * 1000, jitter: false });
    this.attempts = new AttemptLog(ctx.log, `MQTT broker at ${this.broker}`);
  }

  /** The client id the broker knows this agent's session by. */
  get clientId(): string {
    return this.cfg.client_id ?? mqttClientId(defaultDeviceId());
  }

  async start(): Promise<void> {
    this.active = true;
    // Not awaited: a broker that drops packets must not hold up the other sources.
    this.open();
  }

  async stop(): Promise<void> {
    this.active = false;
    clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    const client = this.client;
    this.client = undefined;
    this.connected = false;
    if (!client) return;
    // A DISCONNECT, so a persistent session stays at the broker and keeps what comes meanwhile;
    // a broker that does not answer is not waited for.
    await new Promise<void>((resolve) => {
      const t = timer(() => client.end(true, {}, () => resolve()), 2000);
      client.end(false, {}, () => {
        clearTimeout(t);
        resolve();
      });
    });
  }

  health(): SourceHealth & { counters: Record<string, number> } {
    const { tooLarge, notJson, invalid } = this.counters;
    const silentFor = this.connected && this.cfg.no_data_timeout_s > 0 ? (Date.now() - (this.lastMessageMs ?? this.connectedAtMs)) / 1000 : 0;
    const silent = silentFor > this.cfg.no_data_timeout_s && this.cfg.no_data_timeout_s > 0;
    let detail: string;
    if (!this.active) detail = 'stopped';
    else if (this.connected) detail = `connected to ${this.broker} as ${this.clientId}, subscribed to ${this.cfg.topics.join(', ')}${silent ? `; no message for ${Math.round(silentFor)} s` : ''}`;
    else if (this.backoff.failures > 0) detail = `not connected to ${this.broker}: ${this.lastError ?? 'connection closed'} (${this.backoff.failures} attempts; retrying)`;
    else detail = `connecting to ${this.broker}`;
    if (tooLarge + notJson + invalid > 0) detail += `; refused: ${notJson} not JSON, ${tooLarge} too large, ${invalid} invalid`;
    return sourceHealth(this.ctx, { healthy: this.active && this.connected && !silent, detail }, { ...this.counters });
  }

  private open(): void {
    if (!this.active) return;
    let options: IClientOptions;
    try {
      options = this.options();
    } catch (err) {
      this.lastError = (err as Error).message;
      this.counters.connectFailures += 1;
      this.retry();
      return;
    }
    const client = connect(this.cfg.url, options);
    this.client = client;
    client.on('connect', (connack) => {
      if (client !== this.client) return;
      this.connected = true;
      this.connectedAtMs = Date.now();
      this.counters.connects += 1;
      this.attempts.succeeded(this.backoff.failures);
      this.backoff.reset();
      this.lastError = undefined;
      this.ctx.log.debug({ broker: this.broker, clientId: this.clientId, sessionPresent: connack.sessionPresent }, 'connected to the MQTT broker');
      // Every time, not only the first: a broker that lost the session (restarted without
      // persistence, or clean = true) has lost the subscriptions with it.
      client.subscribe(this.cfg.topics, { qos: this.cfg.qos }, (err, granted) => {
        if (err) {
          this.ctx.log.error({ broker: this.broker, err: err.message }, 'subscribing failed');
          return;
        }
        const refused = (granted ?? []).filter((g) => g.qos === 128).map((g) => g.topic);
        if (refused.length > 0) this.ctx.log.error({ broker: this.broker, topics: refused }, 'the broker refused the subscription to these topics (its ACL?)');
      });
    });
    client.on('message', (topic, payload) => this.onMessage(topic, payload));
    client.on('error', (err) => {
      if (client === this.client) this.lastError = describe(err);
    });
    client.on('close', () => {
      if (client !== this.client || !this.active) return;
      if (this.connected) this.ctx.log.warn({ broker: this.broker }, 'connection to the MQTT broker closed; reconnecting');
      else this.counters.connectFailures += 1;
      this.connected = false;
      this.retry();
    });
  }

  /** MQTT.js's options, the password and CA read now (a file put right is taken at the next attempt). */
  private options(): IClientOptions {
    const c = this.cfg;
    const options: IClientOptions = {
      clientId: this.clientId,
      clean: c.clean,
      keepalive: c.keepalive_s,
      protocolVersion: 4,
      // Reconnecting is done here, with a backoff; MQTT.js would retry every second forever.
      reconnectPeriod: 0,
      reconnectOnConnackError: true,
      resubscribe: false,
      connectTimeout: 30_000,
    };
    if (c.username) options.username = c.username;
    if (c.password_file) {
      const password = readLine(c.password_file, 'password_file');
      addSecret(password);
      options.password = password;
    }
    if (c.ca_file) options.ca = readLine(c.ca_file, 'ca_file', false);
    return options;
  }

  private retry(): void {
    if (!this.active) return;
    const wait = this.backoff.next();
    this.attempts.failed(this.lastError ?? 'connection closed', this.backoff.failures, wait, this.backoff.atMax);
    clearTimeout(this.retryTimer);
    this.retryTimer = timer(() => {
      this.retryTimer = undefined;
      const old = this.client;
      this.client = undefined;
      if (old) {
        // What a client being torn down may still emit is of no interest (and an 'error' with
        // no listener would throw).
        old.removeAllListeners();
        old.on('error', () => undefined);
        old.end(true);
      }
      this.open();
    }, wait);
  }

  private onMessage(topic: string, payload: Buffer): void {
    this.counters.messages += 1;
    this.lastMessageMs = Date.now();
    const decoded = this.decoder.decode(topic, payload, Date.now());
    for (const p of decoded.problems) {
      this.counters[p.reason] += 1;
      this.ctx.reject(p.text);
    }
    for (const { reading, where } of decoded.readings) this.ctx.emit(reading, where);
  }
}

/** A password file's first line (a trailing newline is not part of it), or a CA file's text. */
function readLine(path: string, key: string, firstLine = true): string {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    throw new Error(`cannot read ${key} ${path} (${e.code ?? e.message})`);
  }
  const value = firstLine ? (text.split(/\r?\n/)[0] ?? '') : text;
  if (value === '') throw new Error(`${key} ${path} is empty`);
  return value;
}
