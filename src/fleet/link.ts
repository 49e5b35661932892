/**
 * The fleet link: the device's side of the carrier's MQTT broker (docs/fleet.md). The broker
 * authenticates the device, enforces its ACL and keeps commands for a truck out of coverage;
 * this part connects with a persistent session (clean = false, so commands published while the
 * truck was away are handed over when it is back), keeps a retained `<prefix>/status` (at
 * connect, every status_interval_s, at each change of state; a Last Will says `online: false`
 * when the agent vanishes, a clean stop says it itself), and takes dispatch's commands on
 * `<prefix>/cmd/<name>` (commands.ts). A command's PUBACK goes only after the commit that
 * applied it (and recorded its answer): MQTT.js sends it when handleMessage calls back.
 */
import { readFileSync } from 'node:fs';
import { rootCertificates } from 'node:tls';
import type { IClientOptions, IPublishPacket, MqttClient } from 'mqtt';
import type { Logger } from 'pino';
import type { Agent } from '../agent.js';
import { Backoff } from '../backoff.js';
import type { FleetView } from '../daemon-state.js';
import type { FleetConfig } from '../config/fleet.js';
import { mqttClientId } from '../config/load.js';
import type { Config } from '../config/schema.js';
import { addSecret } from '../log.js';
import { AttemptLog, dropMqtt, endMqtt, timer } from '../sources/common.js';
import { connectMqtt } from '../sources/mqtt-lib.js';
import { COMMAND_RETENTION_MS, Commands } from './commands.js';
import type { Reply } from './messages.js';
import { fleetStatus, offlineStatus, stateKey } from './status.js';

/** A session at the broker outlives a disconnect this long (MQTT 5; 3.1.1 keeps it for ever). */
const SESSION_EXPIRY_S = 7 * 24 * 3600;
/** A connection that lasts less than this is a failed attempt: the backoff goes on. */
const STABLE_MS = 30_000;
/** One the broker closes sooner than this is closed on purpose (see the close handler). */
const QUICK_CLOSE_MS = 5000;
/** How often a change of state is looked for (from memory: cheap). */
const STATE_LOOK_MS = 2000;
/** The broker resends what it had in flight at CONNACK and its retained commands at SUBACK: old ids are forgotten only after this (commands.ts). */
const PRUNE_SETTLE_MS = 10_000;
const PRUNE_EVERY_MS = 3_600_000;

export class FleetLink {
  private cfg: FleetConfig | undefined;
  private client: MqttClient | undefined;
  private active = false;
  private connected = false;
  private retryTimer: NodeJS.Timeout | undefined;
  private statusTimer: NodeJS.Timeout | undefined;
  private lookTimer: NodeJS.Timeout | undefined;
  private pruneTimer: NodeJS.Timeout | undefined;
  private lastKey = '';
  private lastError: string | undefined;
  /** A refusal of what the device publishes was logged on this connection (once is enough). */
  private refusalLogged = false;
  private readonly backoff = new Backoff({ initialMs: 1000, maxMs: 120_000, jitter: true });
  private attempts: AttemptLog;
  private commands: Commands | undefined;
  readonly counters = { connects: 0, commands: 0, repeated: 0, refused: 0, statusPublished: 0 };

  constructor(
    private readonly agent: Agent,
    private readonly deviceId: string,
    private readonly log: Logger,
  ) {
    this.attempts = new AttemptLog(log, 'fleet broker');
  }

  get prefix(): string {
    return this.cfg?.topic_prefix ?? `fleet/${this.deviceId}`;
  }

  get clientId(): string {
    return this.cfg?.client_id ?? mqttClientId(this.deviceId);
  }

  /** Connect (in the background) if the config has a [fleet] table. */
  start(config: Config): void {
    this.cfg = config.fleet;
    if (!this.cfg) return;
    this.active = true;
    this.commands = new Commands(
      this.agent.store,
      () => this.agent.config,
      () => this.cfg?.max_command_bytes ?? 65_536,
    );
    this.open();
  }

  /** A clean stop: `online: false` retained (unless `quiet`), then a DISCONNECT (no Last Will). */
  async stop(quiet = false): Promise<void> {
    this.active = false;
    clearTimeout(this.retryTimer);
    clearInterval(this.statusTimer);
    clearInterval(this.lookTimer);
    clearTimeout(this.pruneTimer);
    const client = this.client;
    this.client = undefined;
    const wasConnected = this.connected;
    this.connected = false;
    if (!client) return;
    if (quiet) return endMqtt(client, wasConnected, 3000);
    await endMqtt(client, wasConnected, 3000, (then) => client.publish(`${this.prefix}/status`, JSON.stringify(offlineStatus(this.deviceId, 'stopped')), { qos: 1, retain: true }, then));
  }

  /** A reload: a changed [fleet] table takes a new connection with it. */
  async configure(config: Config): Promise<void> {
    if (JSON.stringify(config.fleet) === JSON.stringify(this.cfg)) return;
    // The same status topic on the same broker: the new connection's status follows in a
    // moment. A retained "stopped" in between had every desk alerting at each config push.
    const next = config.fleet && { url: config.fleet.url, prefix: config.fleet.topic_prefix ?? `fleet/${this.deviceId}` };
    await this.stop(next?.url === this.cfg?.url && next?.prefix === this.prefix);
    this.start(config);
  }

  /** The settings this link runs with (reload.test.ts compares them with the file). */
  effective(): Record<string, unknown> {
    const c = this.cfg;
    return c ? { 'fleet.url': c.url, 'fleet.client_id': this.clientId, 'fleet.topic_prefix': this.prefix, 'fleet.status_interval_s': c.status_interval_s, 'fleet.keepalive_s': c.keepalive_s } : {};
  }

  /** For `status`: whether the link is up, and why not (undefined without [fleet]). */
  view(): FleetView | undefined {
    if (!this.cfg) return undefined;
    return { url: this.cfg.url, clientId: this.clientId, connected: this.connected, error: this.connected ? null : (this.lastError ?? null) };
  }

  /** Publish the retained status now (a change of state, a `status` command). */
  publishStatus(): void {
    const client = this.client;
    if (!client || !this.connected) return;
    let payload: string;
    try {
      payload = JSON.stringify(fleetStatus(this.agent, this.deviceId));
      this.lastKey = stateKey(this.agent);
    } catch (err) {
      this.log.error({ err: (err as Error).message }, 'could not build the fleet status');
      return;
    }
    this.counters.statusPublished += 1;
    client.publish(`${this.prefix}/status`, payload, { qos: 1, retain: true }, this.published(`${this.prefix}/status`));
  }

  private open(): void {
    const cfg = this.cfg;
    if (!this.active || !cfg) return;
    let options: IClientOptions;
    try {
      options = this.options(cfg);
    } catch (err) {
      this.lastError = (err as Error).message;
      this.retry();
      return;
    }
    let client: MqttClient;
    try {
      client = connectMqtt(cfg.url, options);
    } catch (err) {
      this.lastError = `MQTT client not started (${(err as Error).message})`;
      this.retry();
      return;
    }
    this.client = client;
    const current = () => client === this.client && this.active;
    // Called for each QoS 1 message; its callback sends the PUBACK. The command is applied and
    // committed first; a message that comes while stopping is not acknowledged (the broker keeps it).
    client.handleMessage = (packet, callback) => {
      if (!current()) return;
      this.onCommand(client, packet);
      callback();
    };
    client.on('connect', () => {
      if (!current()) return;
      this.connected = true;
      connectedAt = Date.now();
      this.counters.connects += 1;
      this.attempts.succeeded(this.backoff.failures);
      this.lastError = undefined;
      this.refusalLogged = false;
      const connected = () => this.log.info({ broker: cfg.url, clientId: this.clientId, prefix: this.prefix }, 'connected to the fleet broker');
      if (cfg.commands) {
        // Said once the subscription is granted: on a first connect the broker drops a command
        // published before it (no session holds it yet), so "connected" means commands arrive.
        client.subscribe(`${this.prefix}/cmd/+`, { qos: 1 }, (err, granted) => {
          if (!current()) return;
          connected();
          const refused = err ? err.message : (granted ?? []).some((g) => g.qos === 128) ? 'refused by the broker (its ACL?)' : undefined;
          if (refused) this.log.error({ topic: `${this.prefix}/cmd/+`, err: refused }, 'could not subscribe to the fleet commands');
          else this.pruneWhileConnected(client);
        });
      } else connected();
      this.publishStatus();
      clearInterval(this.statusTimer);
      this.statusTimer = setInterval(() => this.publishStatus(), cfg.status_interval_s * 1000);
      this.statusTimer.unref();
      clearInterval(this.lookTimer);
      this.lookTimer = setInterval(() => {
        if (stateKey(this.agent) !== this.lastKey) this.publishStatus();
      }, STATE_LOOK_MS);
      this.lookTimer.unref();
    });
    client.on('error', (err) => {
      if (client === this.client) this.lastError = err.message;
    });
    client.on('disconnect', (packet) => {
      // MQTT 5: why the broker ends it (0x8E: another connection took the session over).
      if (current()) this.lastError = `the broker closed the connection (reason code ${packet.reasonCode ?? 0}${packet.reasonCode === 0x8e ? ': session taken over' : ''})`;
    });
    let connectedAt = 0;
    client.on('close', () => {
      if (!current()) return;
      const livedMs = Date.now() - connectedAt;
      // A link that did not last is a failed attempt, and the backoff goes on: two agents with
      // one client id threw each other off every second, for ever (mosquitto closes the older
      // connection without a word), and so does a broker that disconnects on a publish its ACL
      // refuses (AWS IoT Core).
      if (this.connected && livedMs >= STABLE_MS) this.backoff.reset();
      if (this.connected && livedMs < QUICK_CLOSE_MS) {
        this.log.error(
          { broker: cfg.url, clientId: this.clientId, err: this.lastError },
          `connection closed by the broker ${(livedMs / 1000).toFixed(1)} s after it accepted it; reconnecting with backoff. Another device with client id ${this.clientId} (the same device_id or fleet.client_id: a cloned disk?) takes its session and its commands; or the broker disconnects on a publish its ACL refuses`,
        );
      } else if (this.connected) this.log.warn({ broker: cfg.url }, 'connection to the fleet broker closed; reconnecting');
      this.connected = false;
      clearInterval(this.statusTimer);
      clearInterval(this.lookTimer);
      clearTimeout(this.pruneTimer);
      this.retry();
    });
  }

  /** Forget old command ids (COMMAND_RETENTION_MS) once this subscription has settled, then hourly while it lasts; never offline. */
  private pruneWhileConnected(client: MqttClient): void {
    const prune = () => {
      if (client !== this.client || !this.connected) return;
      try {
        const n = this.commands?.prune() ?? 0;
        if (n > 0) this.log.info({ forgotten: n }, `fleet command ids last received more than ${COMMAND_RETENTION_MS / 86_400_000} days ago forgotten`);
      } catch (err) {
        this.log.warn({ err: (err as Error).message }, 'could not forget old fleet command ids; tried again in an hour');
      }
    };
    clearTimeout(this.pruneTimer);
    this.pruneTimer = timer(() => {
      prune();
      this.pruneTimer = setInterval(prune, PRUNE_EVERY_MS).unref();
    }, PRUNE_SETTLE_MS);
  }

  private options(cfg: FleetConfig): IClientOptions {
    const will = offlineStatus(this.deviceId, 'connection lost');
    const options: IClientOptions = {
      clientId: this.clientId,
      clean: false,
      keepalive: cfg.keepalive_s,
      protocolVersion: cfg.protocol_version,
      reconnectPeriod: 0,
      resubscribe: false,
      connectTimeout: 30_000,
      will: { topic: `${this.prefix}/status`, payload: Buffer.from(JSON.stringify(will)), qos: 1, retain: true },
    };
    if (cfg.protocol_version === 5) options.properties = { sessionExpiryInterval: SESSION_EXPIRY_S };
    if (cfg.username) options.username = cfg.username;
    if (cfg.password_file) {
      const password = readText(cfg.password_file, 'fleet.password_file').split(/\r?\n/)[0] ?? '';
      addSecret(password);
      options.password = password;
    }
    if (cfg.ca_file) options.ca = [...rootCertificates, readText(cfg.ca_file, 'fleet.ca_file')];
    if (cfg.cert_file && cfg.key_file) {
      options.cert = readText(cfg.cert_file, 'fleet.cert_file');
      options.key = readText(cfg.key_file, 'fleet.key_file');
    }
    return options;
  }

  private retry(): void {
    if (!this.active) return;
    const wait = this.backoff.next();
    this.attempts.failed(this.lastError ?? 'connection closed', this.backoff.failures, wait, this.backoff.atMax);
    clearTimeout(this.retryTimer);
    this.retryTimer = timer(() => {
      dropMqtt(this.client);
      this.client = undefined;
      this.open();
    }, wait);
  }

  private onCommand(client: MqttClient, packet: IPublishPacket): void {
    const topic = String(packet.topic);
    const cmdPrefix = `${this.prefix}/cmd/`;
    const payload = Buffer.isBuffer(packet.payload) ? packet.payload : Buffer.from(packet.payload);
    this.counters.commands += 1;
    let handled: ReturnType<Commands['handle']>;
    if (!topic.startsWith(cmdPrefix)) {
      handled = { reply: { commandId: null, ok: false, status: 64, message: `not a command topic: ${topic}` }, repeated: false, effects: {} };
    } else if (!this.cfg?.commands) {
      handled = { reply: { commandId: null, ok: false, status: 64, message: 'commands are off on this device (fleet.commands = false)' }, repeated: false, effects: {} };
    } else {
      try {
        // Stamped as the CLI stamps: on GNSS time while the system clock is not set.
        handled = this.commands!.handle(topic.slice(cmdPrefix.length), payload, this.agent.clockKeeper.gnss.commandNow());
      } catch (err) {
        // Nothing a message holds may take the daemon down.
        handled = { reply: { commandId: null, ok: false, status: 1, message: `could not be read: ${(err as Error).message}` }, repeated: false, effects: {} };
      }
    }
    const { reply, repeated, effects } = handled;
    if (repeated) this.counters.repeated += 1;
    if (!reply.ok && !repeated) this.counters.refused += 1;
    const fields = { topic, commandId: reply.commandId, status: reply.status, repeated };
    if (reply.ok) this.log.info(fields, repeated ? 'fleet command seen before: answered again, not applied again' : `fleet command applied: ${reply.message}`);
    else this.log.warn({ ...fields, err: reply.message }, 'fleet command refused');
    this.reply(client, reply, packet);
    if (effects.kick) void this.agent.sender.kick();
    if (effects.status) this.publishStatus();
  }

  /**
   * A publish's callback. A broker's refusal (an MQTT 5 PUBACK reason code such as 135, not
   * authorised) was a debug line: a device whose user name did not match its ACL said only
   * "connected", and the desk never saw its status. Said once a connection, as an error.
   */
  private published(topic: string): (err?: Error) => void {
    return (err) => {
      if (!err) return;
      const refused = typeof (err as { code?: unknown }).code === 'number';
      if (!refused || this.refusalLogged) return this.log.debug({ topic, err: err.message }, 'not published');
      this.refusalLogged = true;
      const user = this.cfg?.username ?? 'the name in its certificate';
      this.log.error(
        { topic, err: err.message },
        `the broker refuses what this device publishes on ${topic} (${err.message}): its ACL must let ${user} write ${this.prefix}/status and ${this.prefix}/reply/# (with the ACL of docs/fleet.md, the user name is the device id)`,
      );
    };
  }

  private reply(client: MqttClient, reply: Reply, packet: IPublishPacket): void {
    const payload = JSON.stringify(reply);
    const topic = `${this.prefix}/reply/${reply.commandId ?? 'invalid'}`;
    client.publish(topic, payload, { qos: 1 }, this.published(topic));
    const responseTopic = packet.properties?.responseTopic;
    if (responseTopic && responseTopic !== topic && !publishable(responseTopic)) {
      // A PUBLISH to it is a protocol error: the broker drops the link before the PUBACK, and
      // hands the command over again at each reconnect, for ever.
      this.log.warn({ commandId: reply.commandId, responseTopic }, `the command's response topic is not a topic the answer can be published to (a wildcard, or too long): answered on ${topic} only`);
    } else if (responseTopic && responseTopic !== topic) {
      const correlationData = packet.properties?.correlationData;
      client.publish(responseTopic, payload, { qos: 1, properties: correlationData ? { correlationData } : {} }, this.published(responseTopic));
    }
  }
}

/** A topic name a PUBLISH may carry (MQTT 5, 4.7): no wildcard, no NUL, at most 65,535 bytes. */
function publishable(topic: string): boolean {
  return !/[+#]/.test(topic) && !topic.includes('\0') && Buffer.byteLength(topic) <= 65_535;
}

function readText(path: string, key: string): string {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    throw new Error(`cannot read ${key} ${path} (${e.code ?? e.message})`);
  }
  if (text.trim() === '') throw new Error(`${key} ${path} is empty`);
  return text;
}
