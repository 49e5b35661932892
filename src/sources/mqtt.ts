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
import { rootCertificates } from 'node:tls';
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
  /** Readings in good form, each with where it came from (for admission's log line), and whether the message gave its time. */
  readings: Array<{ reading: Reading; where: string; timed: boolean }>;
  /** One per refused message or reading, with its reason. */
  problems: Array<{ reason: MqttRejectReason; text: string }>;
}

/** Epoch numbers below this are seconds (1e11 s is the year 5138; 1e11 ms is 1973). */
const SECONDS_BELOW = 1e11;
const ISO_WITH_ZONE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})$/i;

/**
 * A payload's value in words for a problem line: never JSON.stringify, which throws on a value
 * nested a few thousand deep (a 10 KB message) and would take the daemon down with it.
 */
function describeValue(v: unknown): string {
  if (typeof v === 'string') return preview(v, 30);
  if (typeof v === 'number' || typeof v === 'boolean') return String(v);
  if (v === null) return 'null';
  return Array.isArray(v) ? 'an array' : typeof v === 'object' ? 'an object' : typeof v;
}

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
      else out.readings.push({ reading: r, where, timed: valueAt(item as Json, this.m.fields.time ?? 'time') != null });
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
      return `${name(field)}: expected a number, got ${describeValue(v)}`;
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
      else return v === undefined ? `${name('resourceId')}: missing (or set resource_from_topic)` : `${name('resourceId')}: expected a string, got ${describeValue(v)}`;
    }
    if (resourceId.length === 0 || resourceId.length > 64) return `${this.m.resourceFromTopic !== undefined ? 'resource id from the topic' : name('resourceId')}: expected 1 to 64 characters`;

    const time = get('time');
    let timeMs: number;
    if (time === undefined) timeMs = nowMs;
    else if (typeof time === 'number' && Number.isFinite(time) && time > 0) timeMs = Math.round(time < SECONDS_BELOW ? time * 1000 : time);
    else if (typeof time === 'string' && ISO_WITH_ZONE.test(time) && Number.isFinite(Date.parse(time))) timeMs = Date.parse(time);
    else return `${name('time')}: expected an ISO 8601 time with Z or an offset, or epoch seconds or milliseconds, got ${describeValue(time)}`;

    const values: Record<string, number | undefined> = {};
    for (const field of ['latitude', 'longitude', 'speed', 'heading', 'odometer', 'temperature']) {
      const v = num(field);
      if (typeof v === 'string') return v;
      values[field] = v;
    }
    const unit = get('temperatureUnit') ?? this.m.temperatureUnit;
    if (unit !== 'C' && unit !== 'F') return `${name('temperatureUnit')}: expected "C" or "F", got ${describeValue(unit)}`;
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

/**
 * Whether a topic is one a filter subscribes to (`+` one level, `#` the rest, none of them
 * matching a first level that starts with `$`).
 */
export function topicMatches(filter: string, topic: string): boolean {
  const f = filter.split('/');
  const t = topic.split('/');
  if (topic.startsWith('$') && (f[0] === '+' || f[0] === '#')) return false;
  for (let i = 0; i < f.length; i++) {
    if (f[i] === '#') return true;
    if (i >= t.length || (f[i] !== '+' && f[i] !== t[i])) return false;
  }
  return f.length === t.length;
}

/** A session at the broker outlives a disconnect this long (MQTT 5; 3.1.1 keeps it for ever). */
const SESSION_EXPIRY_S = 7 * 24 * 3600;
/** Bytes a PUBLISH adds to its payload at most: fixed header, topic, packet id, properties. */
const PUBLISH_OVERHEAD = 65_536 + 1024;

export class MqttSource implements Source {
  readonly type = 'mqtt';
  readonly name: string;
  private readonly decoder: MqttDecoder;
  private readonly backoff: Backoff;
  private readonly attempts: AttemptLog;
  private readonly broker: string;
  /** A connection that lasted this long was a real one: the backoff starts over after it. */
  private readonly stableMs: number;
  private client: MqttClient | undefined;
  private active = false;
  private connected = false;
  /** The broker acknowledged the subscriptions of the current connection. */
  private subscribed = false;
  /** Why the subscriptions of the current connection failed, if they did. */
  private subscribeError: string | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  private lastError: string | undefined;
  private lastMessageMs: number | undefined;
  private connectedAtMs = 0;
  readonly counters = { messages: 0, tooLarge: 0, notJson: 0, invalid: 0, otherTopic: 0, retainedWithoutTime: 0, connects: 0, connectFailures: 0 };

  constructor(
    private readonly cfg: MqttSourceConfig,
    private readonly ctx: SourceContext,
  ) {
    this.broker = brokerName(cfg.url);
    this.name = cfg.name ?? `mqtt:${new URL(cfg.url).host}`;
    this.decoder = new MqttDecoder({ fields: cfg.fields, resourceFromTopic: cfg.resource_from_topic, temperatureUnit: cfg.temperature_unit, maxMessageBytes: cfg.max_message_bytes });
    this.backoff = new Backoff({ initialMs: cfg.reconnect_initial_s * 1000, maxMs: cfg.reconnect_max_s * 1000, jitter: false });
    this.stableMs = Math.max(10_000, cfg.reconnect_max_s * 1000);
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
    // First: a message that arrives from here on is neither taken nor acknowledged, so the
    // broker keeps it for the next start (taken and acknowledged late, it came twice).
    this.active = false;
    clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    const client = this.client;
    this.client = undefined;
    const wasConnected = this.connected;
    this.connected = false;
    this.subscribed = false;
    if (!client) return;
    await new Promise<void>((resolve) => {
      // Not connected yet, or a broker that does not answer the DISCONNECT: the socket is
      // closed at once (a connect under way would otherwise hold the process for its timeout).
      const force = () => {
        client.end(true, {}, () => undefined);
        client.stream?.destroy();
        resolve();
      };
      if (!wasConnected) return force();
      const t = timer(force, 2000);
      // A DISCONNECT, so a persistent session stays at the broker and keeps what comes meanwhile.
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
    else if (this.connected) {
      const topics = this.cfg.topics.join(', ');
      detail = `connected to ${this.broker} as ${this.clientId}, ${this.subscribed ? `subscribed to ${topics}` : (this.subscribeError ?? `subscribing to ${topics}`)}${silent ? `; no message for ${Math.round(silentFor)} s` : ''}`;
    } else if (this.backoff.failures > 0) detail = `not connected to ${this.broker}: ${this.lastError ?? 'connection closed'} (${this.backoff.failures} attempts; retrying)`;
    else detail = `connecting to ${this.broker}`;
    if (tooLarge + notJson + invalid > 0) detail += `; refused: ${notJson} not JSON, ${tooLarge} too large, ${invalid} invalid`;
    return sourceHealth(this.ctx, { healthy: this.active && this.connected && this.subscribed && !silent, detail }, { ...this.counters });
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
    const current = () => client === this.client && this.active;
    // MQTT.js acknowledges a QoS 1 message once this calls back: not for a client being
    // replaced or stopped, so the broker keeps the message.
    client.handleMessage = (_packet, callback) => {
      if (current()) callback();
    };
    client.on('connect', (connack) => {
      if (!current()) return;
      this.connected = true;
      this.subscribed = false;
      this.subscribeError = undefined;
      this.connectedAtMs = Date.now();
      this.counters.connects += 1;
      this.attempts.succeeded(this.backoff.failures);
      this.lastError = undefined;
      this.ctx.log.debug({ broker: this.broker, clientId: this.clientId, sessionPresent: connack.sessionPresent }, 'connected to the MQTT broker');
      // Every time, not only for a new session: the broker may have lost it, and the config may
      // name a topic the session does not have yet. With MQTT 5 a subscription the session
      // has does not send the retained messages again (rh 1); with 3.1.1 it does, and those
      // without a time of their own are left out (onMessage).
      client.subscribe(this.cfg.topics, { qos: this.cfg.qos, ...(this.cfg.protocol_version === 5 ? { rh: 1 } : {}) }, (err, granted) => {
        if (!current()) return;
        if (err) {
          this.subscribeError = `subscribing failed: ${err.message}`;
          this.ctx.log.error({ broker: this.broker, err: err.message }, 'subscribing failed');
          return;
        }
        const refused = (granted ?? []).filter((g) => g.qos === 128).map((g) => g.topic);
        if (refused.length > 0) {
          this.subscribeError = `the broker refused the subscription to ${refused.join(', ')}`;
          this.ctx.log.error({ broker: this.broker, topics: refused }, 'the broker refused the subscription to these topics (its ACL?)');
          return;
        }
        this.subscribed = true;
      });
    });
    client.on('message', (topic, payload, packet) => {
      if (current()) this.onMessage(topic, payload, packet.retain);
    });
    client.on('error', (err) => {
      if (client === this.client) this.lastError = describe(err);
    });
    client.on('close', () => {
      if (!current()) return;
      if (this.connected) {
        this.ctx.log.warn({ broker: this.broker }, 'connection to the MQTT broker closed; reconnecting');
        // Only a connection that lasted starts the backoff over: a broker that takes us and
        // throws us out at once (another agent with the same client id, an ACL) is retried
        // ever more slowly, not every second.
        if (Date.now() - this.connectedAtMs >= this.stableMs) this.backoff.reset();
      } else {
        this.counters.connectFailures += 1;
      }
      this.connected = false;
      this.subscribed = false;
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
      protocolVersion: c.protocol_version,
      // Reconnecting is done here, with a backoff; MQTT.js would retry every second forever.
      reconnectPeriod: 0,
      reconnectOnConnackError: true,
      resubscribe: false,
      connectTimeout: 30_000,
    };
    if (c.protocol_version === 5) {
      // MQTT 5 ends a session at the disconnect unless told otherwise; and the broker does
      // not send a message the agent would only drop (max_message_bytes, and the topic).
      options.properties = { maximumPacketSize: c.max_message_bytes + PUBLISH_OVERHEAD, ...(c.clean ? {} : { sessionExpiryInterval: SESSION_EXPIRY_S }) };
    }
    if (c.username) options.username = c.username;
    if (c.password_file) {
      const password = readLine(c.password_file, 'password_file');
      addSecret(password);
      options.password = password;
    }
    // Added to the public CAs, not instead of them (Node's `ca` replaces them).
    if (c.ca_file) options.ca = [...rootCertificates, readLine(c.ca_file, 'ca_file', false)];
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

  private onMessage(topic: string, payload: Buffer, retained: boolean): void {
    this.counters.messages += 1;
    this.lastMessageMs = Date.now();
    // A topic the config no longer names: the persistent session still had its subscription.
    if (!this.cfg.topics.some((f) => topicMatches(f, topic))) {
      this.counters.otherTopic += 1;
      if (this.counters.otherTopic === 1) this.ctx.log.warn({ topic, topics: this.cfg.topics }, 'message on a topic not in `topics` (a subscription the session kept from an earlier config); ignored');
      return;
    }
    try {
      const decoded = this.decoder.decode(topic, payload, Date.now());
      for (const p of decoded.problems) {
        this.counters[p.reason] += 1;
        this.ctx.reject(p.text);
      }
      for (const { reading, where, timed } of decoded.readings) {
        // A retained message is the last one published, sent again at each new subscription:
        // stamped with the arrival time, an old temperature would pass for a new one.
        if (retained && !timed) {
          this.counters.retainedWithoutTime += 1;
          continue;
        }
        this.ctx.emit(reading, where);
      }
    } catch (err) {
      // Nothing a payload holds may take the daemon down (nor come back after each restart).
      this.counters.invalid += 1;
      this.ctx.reject(`topic ${topic}: could not be read (${(err as Error).message})`);
    }
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
