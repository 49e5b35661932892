/**
 * The `[[sources]]` tables of the config, one schema per source type (the part of the one
 * config schema that grows with every new kind of device).
 */
import * as z from 'zod';
import { readDateTime } from '../geo/localtime.js';
import { RESOURCE_TYPES, resourceTypeOf } from '../milestones/codes.js';

export const positiveInt = z.number().int().positive();
export const nonNegative = z.number().finite().nonnegative();
/**
 * A wait the agent sets a timer for, in seconds: at most a day. Node's timers take at most
 * 24.8 days and fire at once beyond that (a `retry_max_s = 1e12` retried in a tight loop).
 */
export const MAX_WAIT_S = 86_400;
export const waitS = z.number().positive().max(MAX_WAIT_S);
/** The same, where 0 turns it off. */
export const waitOrOffS = nonNegative.max(MAX_WAIT_S);

/** `Truck`, `Trailer` or `Driver`; the case is fixed (`trailer` -> `Trailer`). */
export const resourceTypeSchema = z.string().transform((s, ctx) => {
  const t = resourceTypeOf(s);
  if (!t) {
    ctx.addIssue({ code: 'custom', message: `expected one of ${RESOURCE_TYPES.join(', ')}` });
    return z.NEVER;
  }
  return t;
});
const resourceType = resourceTypeSchema;
export const resourceId = z.string().min(1).max(64);

/** A simulator's fastest time_scale (and `demo --time-scale`'s): simulated seconds per real second. */
export const MAX_TIME_SCALE = 100_000;

const temperatureModel = z.strictObject({
  set_point_c: z.number().finite().default(-18),
  ambient_c: z.number().finite().default(22),
  noise_c: nonNegative.default(0.2),
  /** Simulated seconds after the start of the route when the door opens; negative: never. */
  door_open_at_s: z.number().finite().default(-1),
  door_open_duration_s: nonNegative.default(600),
  /** Fraction of the gap to the target closed per simulated minute. */
  response_per_min: z.number().gt(0).max(1).default(0.15),
});

const stopSchemaForSimulator = z.strictObject({
  /** Index of the route point where the truck stops. */
  at_point: z.number().int().nonnegative(),
  dwell_s: nonNegative.default(1800),
});

/** A simulator's start: with Z, an offset, or neither (the device's zone), as Date.parse reads it. */

export const simulatorSourceSchema = z.strictObject({
  type: z.literal('simulator'),
  name: z.string().min(1).optional(),
  resource_id: resourceId,
  resource_type: resourceType.default('Truck'),
  /** `builtin:chicago-indianapolis`, or a path to a GPX, GeoJSON (LineString) or CSV (lat,lon) file. */
  route: z.string().min(1).default('builtin:chicago-indianapolis'),
  speed_kmh: z.number().positive().max(200).default(88),
  /** Simulated seconds per wall-clock second. */
  time_scale: z.number().positive().max(MAX_TIME_SCALE).default(1),
  /** Simulated seconds between readings. */
  interval_s: waitS.default(1),
  /** Where the simulated clock starts: `now`, or an ISO 8601 time (checked here: a bad one failed the start with exit 1). */
  start_time: z
    .string()
    .refine((t) => t === 'now' || readDateTime(t) !== undefined, 'expected "now" or an ISO 8601 time such as 2026-01-15T08:00:00Z')
    .default('now'),
  /** Pauses at route points (loading, unloading). */
  stops: z.array(stopSchemaForSimulator).default([]),
  /** Start again from the beginning after the end of the route instead of stopping. */
  loop: z.boolean().default(false),
  temperature: temperatureModel.prefault({}),
  odometer_start_km: nonNegative.default(120_000),
});

/**
 * Where the odometer of a source's readings comes from: `gnss`, the distance between its
 * fixes (src/admission/odometer.ts), for a receiver that has none; `none`, only what the
 * source reports itself. A reading that carries its own odometer keeps it either way.
 */
const odometerMode = (d: 'gnss' | 'none') => z.enum(['gnss', 'none']).default(d);
/** Where the GNSS odometer starts (km) for the source's resources, e.g. the truck's own reading. */
const odometerStartKm = nonNegative.optional();

/** Name in logs and `status`; default: `<type>:<what it reads>`. */
const sourceNameKey = z.string().min(1).optional();
/** Longest line a source accepts; a longer one is skipped as it arrives, never buffered whole. */
const maxLineBytes = (d: number) =>
  positiveInt
    .min(256)
    .max(16 * 1_048_576)
    .default(d);
const BAUD_RATES = [1200, 2400, 4800, 9600, 19200, 38400, 57600, 115200, 230400, 460800, 921600];

/** A gpsd daemon over TCP (its JSON protocol). */
export const gpsdSourceSchema = z
  .strictObject({
    type: z.literal('gpsd'),
    name: sourceNameKey,
    resource_id: resourceId,
    host: z.string().min(1).default('127.0.0.1'),
    port: z.number().int().min(1).max(65535).default(2947),
    /** Only this device's reports (gpsd may serve several); default: every device. */
    device: z.string().min(1).optional(),
    /** No device report (TPV, SKY...) for this long: unhealthy, and the connection is opened again. 0: off. */
    no_data_timeout_s: waitOrOffS.default(30),
    reconnect_initial_s: waitS.default(1),
    reconnect_max_s: waitS.default(60),
    max_line_bytes: maxLineBytes(65_536),
    odometer: odometerMode('gnss'),
    odometer_start_km: odometerStartKm,
  })
  .refine((c) => c.reconnect_max_s >= c.reconnect_initial_s, { path: ['reconnect_max_s'], message: 'expected a number >= reconnect_initial_s' });

/** NMEA 0183 sentences from a serial device, a FIFO or a recorded file. */
export const nmeaSourceSchema = z
  .strictObject({
    type: z.literal('nmea'),
    name: sourceNameKey,
    resource_id: resourceId,
    /** A tty (e.g. /dev/ttyUSB0, set with stty to `baud`), a FIFO, or a regular file read once. */
    device: z.string().min(1),
    /** Line speed of a tty (ignored for FIFOs and files). */
    baud: z
      .number()
      .int()
      .refine((b) => BAUD_RATES.includes(b), `expected a baud rate (${BAUD_RATES.join(', ')})`)
      .default(4800),
    /** No bytes for this long from a tty or FIFO: unhealthy, and a tty is opened again. 0: off. */
    no_data_timeout_s: waitOrOffS.default(30),
    reopen_initial_s: waitS.default(1),
    reopen_max_s: waitS.default(60),
    /** Sentences are at most 82 characters; proprietary ones a little more. */
    max_line_bytes: maxLineBytes(4096),
    odometer: odometerMode('gnss'),
    odometer_start_km: odometerStartKm,
  })
  .refine((c) => c.reopen_max_s >= c.reopen_initial_s, { path: ['reopen_max_s'], message: 'expected a number >= reopen_initial_s' });

/** DS18B20 (and other w1_therm) temperature sensors through the Linux 1-Wire sysfs. */
export const onewireSourceSchema = z.strictObject({
  type: z.literal('onewire'),
  name: sourceNameKey,
  /** Where the kernel lists 1-Wire devices (a fake tree in tests). */
  sysfs_root: z.string().min(1).default('/sys/bus/w1/devices'),
  /** Sensor id (the directory name, e.g. "28-0316a2792aff") = resource id. Unlisted sensors are ignored. */
  sensors: z.record(z.string(), resourceId).superRefine((m, ctx) => {
    if (Object.keys(m).length === 0) ctx.addIssue({ code: 'custom', message: 'expected at least one sensor: "28-..." = "TRAILER-1"' });
    for (const id of Object.keys(m)) {
      if (!/^[0-9a-f]{2}-[0-9a-f]{12}$/.test(id)) ctx.addIssue({ code: 'custom', path: [id], message: 'expected a 1-Wire id such as 28-0316a2792aff' });
    }
  }),
  /** Seconds between reads of all sensors (each read takes ~0.75 s on the bus). */
  interval_s: z.number().positive().max(86_400).default(30),
  /** `w1_slave` (CRC line checked), `temperature` (newer kernels), or `auto`: w1_slave when present. */
  file: z.enum(['auto', 'w1_slave', 'temperature']).default('auto'),
});

/** A command printing one JSON reading per line (the universal adapter). */
export const execSourceSchema = z
  .strictObject({
    type: z.literal('exec'),
    name: sourceNameKey,
    /** A string runs under /bin/sh -c; an array is the program and its arguments, no shell. */
    command: z.union([z.string().min(1), z.array(z.string().min(1)).refine((a) => a.length > 0, 'expected the program and its arguments, e.g. ["reefer-reader", "--port", "/dev/ttyS1"]')]),
    /** Working directory of the command; default: the agent's. */
    cwd: z.string().min(1).optional(),
    /** Extra environment variables for the command. */
    env: z.record(z.string(), z.string()).default({}),
    max_line_bytes: maxLineBytes(65_536),
    /** After the command exits it is started again, waiting restart_initial_s, doubling up to restart_max_s. */
    restart_initial_s: waitS.default(1),
    restart_max_s: waitS.default(60),
    /** No output line for this long: unhealthy (the command is left running). 0: off. */
    no_data_timeout_s: waitOrOffS.default(0),
    /** On stop, SIGTERM to the command's process group, then SIGKILL after this long. */
    stop_timeout_s: z.number().positive().max(600).default(5),
    odometer: odometerMode('none'),
    odometer_start_km: odometerStartKm,
  })
  .refine((c) => c.restart_max_s >= c.restart_initial_s, { path: ['restart_max_s'], message: 'expected a number >= restart_initial_s' });

/** The reading fields a message may carry (the exec line format), which `fields` can rename. */
export const MQTT_FIELDS = ['resourceId', 'time', 'latitude', 'longitude', 'speed', 'heading', 'odometer', 'temperature', 'temperatureUnit'] as const;

export const MQTT_PROTOCOLS = ['mqtt:', 'mqtts:', 'ws:', 'wss:'];

/** An MQTT topic filter: levels split by `/`, `+` a whole level, `#` only as the last level. */
const topicFilter = z
  .string()
  .min(1)
  .max(65_535)
  .superRefine((t, ctx) => {
    const levels = t.split('/');
    levels.forEach((level, i) => {
      if (level.includes('#') && (level !== '#' || i !== levels.length - 1)) ctx.addIssue({ code: 'custom', message: `"#" must be a whole level and the last one (e.g. "fleet/#"): ${JSON.stringify(t)}` });
      if (level.includes('+') && level !== '+') ctx.addIssue({ code: 'custom', message: `"+" must be a whole level (e.g. "fleet/+/telemetry"): ${JSON.stringify(t)}` });
    });
  });

/**
 * receive_maximum when not set, by protocol_version: MQTT 5 tells the broker; 3.1.1 cannot, and
 * mosquitto sends such a client 20 unacknowledged messages at most (max_inflight_messages).
 */
export const MQTT_RECEIVE_MAXIMUM = { 5: 1000, 4: 20 } as const;

/** Readings published to an MQTT broker (depot gateways, sensor hubs). */
export const mqttSourceSchema = z
  .strictObject({
    type: z.literal('mqtt'),
    name: sourceNameKey,
    /** The broker: mqtt://host:1883, mqtts://host:8883 (TLS), ws:// or wss:// (MQTT over WebSocket). */
    url: z.string().superRefine((u, ctx) => {
      let url: URL;
      try {
        url = new URL(u);
      } catch {
        ctx.addIssue({ code: 'custom', message: 'expected a URL such as mqtt://broker.local:1883' });
        return;
      }
      if (!MQTT_PROTOCOLS.includes(url.protocol)) ctx.addIssue({ code: 'custom', message: `expected mqtt://, mqtts://, ws:// or wss://, not ${url.protocol}//` });
      // A password in the URL would be in the config for anyone who can read it, and in log lines.
      if (url.password) ctx.addIssue({ code: 'custom', message: 'a password in the URL: put it in password_file, and the user name in username' });
    }),
    /** Topic filters to subscribe to; `+` and `#` wildcards allowed. */
    topics: z.array(topicFilter).min(1, 'expected at least one topic, e.g. ["fleet/+/telemetry"]'),
    /**
     * The session's name at the broker; default: telematics-agent-<device_id> (plus -<name>
     * when there are several MQTT sources). Keep it stable with clean = false: a new one starts
     * a new session, and the old one's messages stay queued at the broker.
     */
    client_id: z.string().min(1).max(128).optional(),
    username: z.string().min(1).optional(),
    /** A file holding the password (its first line); never the password itself in the config. */
    password_file: z.string().min(1).optional(),
    /** PEM CA certificates trusted for mqtts:// and wss://, besides the public ones. */
    ca_file: z.string().min(1).optional(),
    /**
     * 5: the broker is told max_message_bytes and never sends a larger message (with 4,
     * MQTT 3.1.1, a larger one is read whole before it is dropped).
     */
    protocol_version: z.union([z.literal(4), z.literal(5)]).default(5),
    /** 1: the broker keeps a message until the agent has it (with clean = false, also while the agent is down). */
    qos: z.union([z.literal(0), z.literal(1)]).default(1),
    /**
     * false: a persistent session. The broker keeps the subscriptions and the QoS 1 messages
     * published while the agent is away, and hands them over when it comes back.
     */
    clean: z.boolean().default(false),
    /**
     * QoS 1 messages the broker may send before the agent acknowledges them (it does once their
     * readings are committed; a commit is made when half of them wait). MQTT 5 tells the broker
     * (Receive Maximum); with 3.1.1 the broker's own limit applies, and this must not be above
     * it (mosquitto: max_inflight_messages). Default: MQTT_RECEIVE_MAXIMUM.
     */
    receive_maximum: z.number().int().min(2).max(65_535).optional(),
    /**
     * The longest a QoS 1 message waits for the commit that lets it be acknowledged: a commit is
     * made for it then. Longer: fewer commits from a slow feed (flash wear), later acknowledgements.
     */
    ack_delay_ms: z.number().int().min(10).max(60_000).default(500),
    /** The resource id is this level of the topic, counted from 1 (`fleet/+/telemetry`: 2). */
    resource_from_topic: z.number().int().min(1).max(64).optional(),
    /** Payload names of the reading fields, e.g. { temperature = "temp_c", time = "ts" }; a dotted name reaches inside an object ("gps.lat"). */
    fields: z
      .record(z.string(), z.string().min(1))
      .default({})
      .superRefine((m, ctx) => {
        for (const k of Object.keys(m)) {
          if (!(MQTT_FIELDS as readonly string[]).includes(k)) ctx.addIssue({ code: 'custom', path: [k], message: `not a reading field; expected one of ${MQTT_FIELDS.join(', ')}` });
        }
      }),
    /** The unit of temperatures in messages that do not say (temperatureUnit). */
    temperature_unit: z.enum(['C', 'F']).default('C'),
    /** A larger message is dropped and counted, never parsed. */
    max_message_bytes: positiveInt
      .min(256)
      .max(16 * 1_048_576)
      .default(65_536),
    /** Seconds between keep-alive pings; a broker silent for 1.5 times this is gone. */
    keepalive_s: z.number().int().min(5).max(3600).default(30),
    /** No message for this long: unhealthy (the subscription stays). 0: off. */
    no_data_timeout_s: waitOrOffS.default(0),
    reconnect_initial_s: waitS.default(1),
    reconnect_max_s: waitS.default(60),
    odometer: odometerMode('none'),
    odometer_start_km: odometerStartKm,
  })
  .refine((c) => c.reconnect_max_s >= c.reconnect_initial_s, { path: ['reconnect_max_s'], message: 'expected a number >= reconnect_initial_s' })
  .refine((c) => c.password_file === undefined || c.username !== undefined, { path: ['username'], message: 'expected a user name with password_file' });

/** A JavaScript module exporting a source factory. */
export const moduleSourceSchema = z.strictObject({
  type: z.literal('module'),
  name: sourceNameKey,
  /** The module file (ESM, .js or .mjs). */
  path: z.string().min(1),
  /** Passed as it is to the factory's second argument. */
  options: z.record(z.string(), z.unknown()).default({}),
  odometer: odometerMode('none'),
  odometer_start_km: odometerStartKm,
});

export const sourceSchema = z.discriminatedUnion('type', [simulatorSourceSchema, gpsdSourceSchema, nmeaSourceSchema, onewireSourceSchema, execSourceSchema, mqttSourceSchema, moduleSourceSchema]);

export type SourceConfig = z.infer<typeof sourceSchema>;
export type SimulatorSourceConfig = z.infer<typeof simulatorSourceSchema>;
export type GpsdSourceConfig = z.infer<typeof gpsdSourceSchema>;
export type NmeaSourceConfig = z.infer<typeof nmeaSourceSchema>;
export type OnewireSourceConfig = z.infer<typeof onewireSourceSchema>;
export type ExecSourceConfig = z.infer<typeof execSourceSchema>;
export type ModuleSourceConfig = z.infer<typeof moduleSourceSchema>;
export type MqttSourceConfig = z.infer<typeof mqttSourceSchema>;
