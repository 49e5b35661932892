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
 * messages published while the agent is down or reconnecting are handed over when it is back,
 * and a QoS 1 message is acknowledged only once its reading is committed (acks.ts), so one the
 * agent took but had not committed when it was killed comes again too.
 */
import type { Reading } from '../reading.js';
import { readFileSync } from 'node:fs';
import { rootCertificates } from 'node:tls';
import type { IClientOptions, MqttClient } from 'mqtt';
import { Backoff } from '../backoff.js';
import { MQTT_RECEIVE_MAXIMUM, type MqttSourceConfig } from '../config/schema.js';
import { defaultDeviceId, mqttClientId } from '../config/load.js';
import { addSecret } from '../log.js';
import { ACK_LATER, AckQueue, CAN_ACK_LATER, sendPuback } from './acks.js';
import { AttemptLog, dropMqtt, endMqtt, sourceHealth, timer } from './common.js';
import { MqttDecoder } from './mqtt-decode.js';
import { connectMqtt } from './mqtt-lib.js';
import type { Source, SourceContext, SourceHealth } from './types.js';

export { type DecodedMessage, MqttDecoder, type MqttMapping, type MqttRejectReason } from './mqtt-decode.js';

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
  /** Unacknowledged QoS 1 messages the broker may send (MQTT 5 tells it). */
  private readonly window: number;
  /** QoS 1 messages acknowledged once committed; undefined: on arrival (QoS 0, or a context that cannot tell commits). */
  private readonly acks: AckQueue | undefined;
  readonly counters = { messages: 0, tooLarge: 0, notJson: 0, invalid: 0, otherTopic: 0, retainedWithoutTime: 0, duplicates: 0, connects: 0, connectFailures: 0 };

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
    this.window = cfg.receive_maximum ?? MQTT_RECEIVE_MAXIMUM[cfg.protocol_version];
    if (ctx.commits && cfg.qos === 1 && CAN_ACK_LATER) {
      const ack = (messageId: number) => {
        if (this.client?.connected) sendPuback(this.client, messageId);
      };
      this.acks = new AckQueue(ctx.commits, { delayMs: cfg.ack_delay_ms, batch: Math.max(1, Math.floor(this.window / 2)) }, ack, () => this.reconnect());
    }
  }

  /** The client id the broker knows this agent's session by. */
  get clientId(): string {
    return this.cfg.client_id ?? mqttClientId(defaultDeviceId());
  }

  async start(): Promise<void> {
    this.active = true;
    if (this.ctx.commits && this.cfg.qos === 1 && !CAN_ACK_LATER)
      this.ctx.log.error('this MQTT.js cannot acknowledge a message after its commit: QoS 1 messages are acknowledged on arrival, and a crash loses those not yet committed');
    // Not awaited: a broker that drops packets must not hold up the other sources.
    this.open();
  }

  async stop(): Promise<void> {
    // First: a message that arrives from here on is neither taken nor acknowledged, so the
    // broker keeps it for the next start (taken and acknowledged late, it came twice).
    this.active = false;
    // What waits for its commit: committed and acknowledged now, before the DISCONNECT (the
    // broker would send it again at the next start, and it would be committed twice).
    this.acks?.commitNow();
    this.acks?.stop();
    clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    const client = this.client;
    this.client = undefined;
    const wasConnected = this.connected;
    this.connected = false;
    this.subscribed = false;
    if (!client) return;
    await endMqtt(client, wasConnected, 2000);
  }

  health(): SourceHealth & { counters: Record<string, number> } {
    const { tooLarge, notJson, invalid } = this.counters;
    const silentFor = this.connected && this.cfg.no_data_timeout_s > 0 ? (performance.now() - (this.lastMessageMs ?? this.connectedAtMs)) / 1000 : 0;
    const silent = silentFor > this.cfg.no_data_timeout_s && this.cfg.no_data_timeout_s > 0;
    let detail: string;
    if (!this.active) detail = 'stopped';
    else if (this.connected) {
      const topics = this.cfg.topics.join(', ');
      detail = `connected to ${this.broker} as ${this.clientId}, ${this.subscribed ? `subscribed to ${topics}` : (this.subscribeError ?? `subscribing to ${topics}`)}${silent ? `; no message for ${Math.round(silentFor)} s` : ''}`;
    } else if (this.backoff.failures > 0) detail = `not connected to ${this.broker}: ${this.lastError ?? 'connection closed'} (${this.backoff.failures} attempts; retrying)`;
    else detail = `connecting to ${this.broker}`;
    if (tooLarge + notJson + invalid > 0) detail += `; refused: ${notJson} not JSON, ${tooLarge} too large, ${invalid} invalid`;
    return sourceHealth(this.ctx, { healthy: this.active && this.connected && this.subscribed && !silent, detail }, { ...this.counters, droppedBeforeCommit: this.acks?.dropped ?? 0 });
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
    const client = connectMqtt(this.cfg.url, options);
    this.client = client;
    const current = () => client === this.client && this.active;
    // MQTT.js acknowledges a QoS 1 message once this calls back without an error: not for a
    // client being replaced or stopped, so the broker keeps the message; and not when the
    // acknowledgement waits for the commit (acks.ts).
    client.handleMessage = (packet, callback) => {
      if (current()) callback(this.acks && packet.qos === 1 ? ACK_LATER : undefined);
    };
    client.on('connect', (connack) => {
      if (!current()) return;
      this.acks?.newConnection();
      this.connected = true;
      this.subscribed = false;
      this.subscribeError = undefined;
      this.connectedAtMs = performance.now();
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
      if (!current()) return;
      const from = this.acks?.position;
      const waiting = this.onMessage(topic, payload, packet.retain, packet.dup);
      // A message sent again whose reading still waits for its commit is acknowledged once that
      // copy is committed (and not, like the copy, if it is dropped instead).
      if (from !== undefined && packet.qos === 1 && packet.messageId !== undefined) this.acks!.take(packet.messageId, Math.min(from, waiting ?? from));
    });
    client.on('error', (err) => {
      if (client === this.client) this.lastError = describe(err);
    });
    client.on('close', () => {
      if (!current()) return;
      this.acks?.newConnection();
      if (this.connected) {
        this.ctx.log.warn({ broker: this.broker }, 'connection to the MQTT broker closed; reconnecting');
        // Only a connection that lasted starts the backoff over: a broker that takes us and
        // throws us out at once (another agent with the same client id, an ACL) is retried
        // ever more slowly, not every second.
        if (performance.now() - this.connectedAtMs >= this.stableMs) this.backoff.reset();
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
      options.properties = { maximumPacketSize: c.max_message_bytes + PUBLISH_OVERHEAD, receiveMaximum: this.window, ...(c.clean ? {} : { sessionExpiryInterval: SESSION_EXPIRY_S }) };
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
      dropMqtt(this.client);
      this.client = undefined;
      this.open();
    }, wait);
  }

  /**
   * A message's reading was dropped from memory before its commit (buffer.max_pending): the
   * connection is closed ('close' opens it again, with the backoff), so the broker, which
   * never had its PUBACK, sends it again.
   */
  private reconnect(): void {
    this.ctx.log.error({ broker: this.broker }, 'a message was dropped from memory before its commit (buffer.max_pending): reconnecting, so the broker sends it again');
    this.client?.end(true);
  }

  /** Takes a message's readings; returns the lowest number of a copy waiting for its commit that one of them is (DUP). */
  private onMessage(topic: string, payload: Buffer, retained: boolean, dup = false): number | undefined {
    let waiting: number | undefined;
    this.counters.messages += 1;
    this.lastMessageMs = performance.now();
    // A topic the config no longer names: the persistent session still had its subscription.
    if (!this.cfg.topics.some((f) => topicMatches(f, topic))) {
      this.counters.otherTopic += 1;
      if (this.counters.otherTopic === 1) this.ctx.log.warn({ topic, topics: this.cfg.topics }, 'message on a topic not in `topics` (a subscription the session kept from an earlier config); ignored');
      return undefined;
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
        // Sent again (DUP: its PUBACK was lost with the connection): a timed reading already
        // committed, or waiting for its commit, is not taken twice.
        const here = dup && timed ? this.alreadyHere(reading) : undefined;
        if (here !== undefined) {
          this.counters.duplicates += 1;
          if (here !== 'stored') waiting = Math.min(waiting ?? here, here);
          continue;
        }
        this.ctx.emit(reading, where);
      }
    } catch (err) {
      // Nothing a payload holds may take the daemon down (nor come back after each restart).
      this.counters.invalid += 1;
      this.ctx.reject(`topic ${topic}: could not be read (${(err as Error).message})`);
    }
    return waiting;
  }

  /** Where a reading sent again is already; not known (an error reading the buffer): taken again, at least once. */
  private alreadyHere(reading: Reading): number | 'stored' | undefined {
    try {
      return this.ctx.find?.(reading);
    } catch (err) {
      this.ctx.log.debug({ err: (err as Error).message }, 'could not look for a reading sent again; taken again');
      return undefined;
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
