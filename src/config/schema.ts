/**
 * The one home of configuration and its defaults. The TOML file uses snake_case keys;
 * everything the agent reads of its configuration comes out of `configSchema.parse`.
 * Unknown keys are errors (a misspelt key silently falling back to a default is how a
 * device ends up sending to the wrong place for a month).
 */
import * as z from 'zod';
import { cronProblem } from '../cron.js';

const positiveInt = z.number().int().positive();
const nonNegative = z.number().finite().nonnegative();

const resourceType = z.string().min(1).max(32);
const resourceId = z.string().min(1).max(64);

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

export const simulatorSourceSchema = z.strictObject({
  type: z.literal('simulator'),
  name: z.string().min(1).optional(),
  resource_id: resourceId,
  resource_type: resourceType.default('Truck'),
  /** `builtin:chicago-indianapolis`, or a path to a GPX, GeoJSON (LineString) or CSV (lat,lon) file. */
  route: z.string().min(1).default('builtin:chicago-indianapolis'),
  speed_kmh: z.number().positive().max(200).default(88),
  /** Simulated seconds per wall-clock second. */
  time_scale: z.number().positive().max(100_000).default(1),
  /** Simulated seconds between readings. */
  interval_s: z.number().positive().default(1),
  /** Where the simulated clock starts: `now`, or an ISO 8601 time. */
  start_time: z.string().default('now'),
  /** Pauses at route points (loading, unloading). */
  stops: z.array(stopSchemaForSimulator).default([]),
  /** Start again from the beginning after the end of the route instead of stopping. */
  loop: z.boolean().default(false),
  temperature: temperatureModel.prefault({}),
  odometer_start_km: nonNegative.default(120_000),
});

/** Name in logs and `status`; default: `<type>:<what it reads>`. */
const sourceNameKey = z.string().min(1).optional();
/** Longest line a source accepts; a longer one is skipped as it arrives, never buffered whole. */
const maxLineBytes = (d: number) => positiveInt.min(256).max(16 * 1_048_576).default(d);
const BAUD_RATES = [1200, 2400, 4800, 9600, 19200, 38400, 57600, 115200, 230400, 460800, 921600];

/** A gpsd daemon over TCP (its JSON protocol). */
export const gpsdSourceSchema = z.strictObject({
  type: z.literal('gpsd'),
  name: sourceNameKey,
  resource_id: resourceId,
  host: z.string().min(1).default('127.0.0.1'),
  port: z.number().int().min(1).max(65535).default(2947),
  /** Only this device's reports (gpsd may serve several); default: every device. */
  device: z.string().min(1).optional(),
  /** No device report (TPV, SKY...) for this long: unhealthy, and the connection is opened again. 0: off. */
  no_data_timeout_s: nonNegative.default(30),
  reconnect_initial_s: z.number().positive().default(1),
  reconnect_max_s: z.number().positive().default(60),
  max_line_bytes: maxLineBytes(65_536),
}).refine((c) => c.reconnect_max_s >= c.reconnect_initial_s, { path: ['reconnect_max_s'], message: 'expected a number >= reconnect_initial_s' });

/** NMEA 0183 sentences from a serial device, a FIFO or a recorded file. */
export const nmeaSourceSchema = z.strictObject({
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
  no_data_timeout_s: nonNegative.default(30),
  reopen_initial_s: z.number().positive().default(1),
  reopen_max_s: z.number().positive().default(60),
  /** Sentences are at most 82 characters; proprietary ones a little more. */
  max_line_bytes: maxLineBytes(4096),
}).refine((c) => c.reopen_max_s >= c.reopen_initial_s, { path: ['reopen_max_s'], message: 'expected a number >= reopen_initial_s' });

/** DS18B20 (and other w1_therm) temperature sensors through the Linux 1-Wire sysfs. */
export const onewireSourceSchema = z.strictObject({
  type: z.literal('onewire'),
  name: sourceNameKey,
  /** Where the kernel lists 1-Wire devices (a fake tree in tests). */
  sysfs_root: z.string().min(1).default('/sys/bus/w1/devices'),
  /** Sensor id (the directory name, e.g. "28-0316a2792aff") = resource id. Unlisted sensors are ignored. */
  sensors: z
    .record(z.string(), resourceId)
    .superRefine((m, ctx) => {
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
export const execSourceSchema = z.strictObject({
  type: z.literal('exec'),
  name: sourceNameKey,
  /** A string runs under /bin/sh -c; an array is the program and its arguments, no shell. */
  command: z.union([
    z.string().min(1),
    z.array(z.string().min(1)).refine((a) => a.length > 0, 'expected the program and its arguments, e.g. ["reefer-reader", "--port", "/dev/ttyS1"]'),
  ]),
  /** Working directory of the command; default: the agent's. */
  cwd: z.string().min(1).optional(),
  /** Extra environment variables for the command. */
  env: z.record(z.string(), z.string()).default({}),
  max_line_bytes: maxLineBytes(65_536),
  /** After the command exits it is started again, waiting restart_initial_s, doubling up to restart_max_s. */
  restart_initial_s: z.number().positive().default(1),
  restart_max_s: z.number().positive().default(60),
  /** No output line for this long: unhealthy (the command is left running). 0: off. */
  no_data_timeout_s: nonNegative.default(0),
  /** On stop, SIGTERM to the command's process group, then SIGKILL after this long. */
  stop_timeout_s: z.number().positive().max(600).default(5),
}).refine((c) => c.restart_max_s >= c.restart_initial_s, { path: ['restart_max_s'], message: 'expected a number >= restart_initial_s' });

/** A JavaScript module exporting a source factory. */
export const moduleSourceSchema = z.strictObject({
  type: z.literal('module'),
  name: sourceNameKey,
  /** The module file (ESM, .js or .mjs). */
  path: z.string().min(1),
  /** Passed as it is to the factory's second argument. */
  options: z.record(z.string(), z.unknown()).default({}),
});

export const sourceSchema = z.discriminatedUnion('type', [
  simulatorSourceSchema,
  gpsdSourceSchema,
  nmeaSourceSchema,
  onewireSourceSchema,
  execSourceSchema,
  moduleSourceSchema,
]);

export const configSchema = z.strictObject({
  /** Names this device in logs, references and the trace splay; default: the host name. */
  device_id: z.string().min(1).max(64).optional(),
  api: z
    .strictObject({
      base_url: z.url({ protocol: /^https?$/, error: 'expected an http:// or https:// URL' }).default('http://127.0.0.1:8787'),
      milestone_path: z.string().startsWith('/').default('/rcsc/events/v1/loads/milestone-requests'),
      trace_path: z.string().startsWith('/').default('/rcsc/events/v1/loads/trace-requests'),
      /** The carrier's SCAC code, sent in the carrierSCAC header. */
      scac: z.string().regex(/^[A-Z]{2,4}$/, 'expected a 2-4 letter SCAC code in capitals'),
      /** File holding the subscription key (preferred; 0600). */
      subscription_key_file: z.string().min(1).optional(),
      /** Inline key: allowed, warned about (config files get copied around). */
      subscription_key: z.string().min(1).optional(),
      timeout_s: z.number().positive().max(600).default(30),
      /** `local`: the spec's local time with offset; `utc`: `YYYY-MM-DDTHH:MM:SSZ`. */
      date_time_format: z.enum(['local', 'utc']).default('local'),
      /** unitOfMeasure of trace temperatures; readings are converted. */
      temperature_unit: z.enum(['C', 'F']).default('C'),
      /** Fixed top-level fields added to every body, e.g. { source = "carrier" }. */
      extra_fields: z.record(z.string(), z.union([z.string(), z.number(), z.boolean()])).default({}),
    }),
  buffer: z
    .strictObject({
      path: z.string().min(1).default('/var/lib/telematics-agent/buffer.db'),
      /** SQLite synchronous level in WAL mode: NORMAL loses at most the last commits on power loss, never corrupts. */
      synchronous: z.enum(['OFF', 'NORMAL', 'FULL']).default('NORMAL'),
      /**
       * SQLite page cache, KiB. Reads walk an index in order, so a big cache buys little and
       * costs RSS on a 512 MB device (better-sqlite3 alone would take 16 MiB).
       */
      cache_kb: positiveInt.min(256).max(1_048_576).default(2048),
      /** Readings are committed together every flush_interval_ms or when this many wait. */
      batch_size: positiveInt.max(100_000).default(500),
      /**
       * 5 s: each commit rewrites a few pages whatever it holds, so at 1 Hz this writes a fifth
       * of what 1 s did; a crash loses at most these seconds not yet committed (a power cut
       * with synchronous NORMAL can cost more anyway), and detected milestones wait as long.
       */
      flush_interval_ms: positiveInt.max(60_000).default(5000),
      /** Size cap of the buffer's data (MB). Past it the oldest readings go first; milestones never. */
      max_size_mb: z.number().positive().default(512),
      /** Readings older than this are dropped (counted and logged); milestones never. */
      max_age_days: z.number().positive().default(30),
    })
    .prefault({}),
  schedule: z
    .strictObject({
      /** Cron expression (5 fields, or 6 with seconds) for trace pushes, in the machine's local time. */
      traces: z
        .string()
        .superRefine((s, ctx) => {
          const problem = cronProblem(s);
          if (problem) ctx.addIssue({ code: 'custom', message: `expected a cron expression such as */15 * * * * (${problem})` });
        })
        .default('*/15 * * * *'),
      /** Each device waits a fixed share of this (derived from device_id) after each tick. */
      splay_s: nonNegative.max(3600).default(120),
    })
    .prefault({}),
  sampling: z
    .strictObject({
      /** At most one trace point per this many seconds of reading time; 0 keeps every reading. */
      interval_s: nonNegative.default(60),
      /** A trace point carries the latest temperature only if it is at most this old. */
      temperature_max_age_s: nonNegative.default(300),
    })
    .prefault({}),
  delivery: z
    .strictObject({
      max_traces_per_request: positiveInt.max(10_000).default(500),
      /** How often the daemon looks for milestones recorded by other processes (the CLI). */
      poll_interval_ms: positiveInt.max(60_000).default(1000),
      retry_initial_s: z.number().positive().default(5),
      retry_max_s: z.number().positive().default(900),
      /** Longest wait a Retry-After may impose. */
      retry_after_max_s: z.number().positive().default(3600),
      /** Retry interval while the service refuses the key, SCAC or path (401/403/404). */
      auth_retry_s: z.number().positive().default(300),
      /** Pause between trace requests while a backlog drains. */
      drain_interval_ms: nonNegative.max(60_000).default(50),
      /** On SIGTERM, how long an in-flight request may take before it is abandoned (kept for the next start). */
      shutdown_timeout_s: z.number().positive().max(3600).default(20),
    })
    .prefault({}),
  privacy: z
    .strictObject({
      /** Keep readings of resources with no active load (they are never sent as traces). */
      record_without_load: z.boolean().default(false),
    })
    .prefault({}),
  codes: z
    .strictObject({
      /** Reason code sent when none is given. */
      default_reason: z.string().min(1).default('NS'),
      /** Codes whose milestone means "left the stop": the next stop becomes the trace's stopsequenceNumber. */
      departure: z.array(z.string().min(1)).default(['AF', 'D1', 'CD']),
      /** Codes the service is known to accept; others are sent with a warning. */
      known: z
        .array(z.string().min(1))
        .default(['X3', 'AF', 'X1', 'D1', 'CD', 'X6', 'SD', 'AA', 'AB', 'AG', 'X5', 'AI', 'AO', 'BE', 'AH', 'NS']),
    })
    .prefault({}),
  milestones: z
    .strictObject({
      /** Detect arrival and departure at a load's stops from positions. */
      detect: z.boolean().default(true),
      /** Arrival radius when a stop gives none, metres. */
      radius_m: z.number().positive().max(50_000).default(300),
      /** Departure when the position leaves radius x this factor (hysteresis against GPS jitter). */
      exit_radius_factor: z.number().min(1).max(10).default(1.5),
      /** Arrived once inside for this long and for at least min_fixes fixes in a row. */
      dwell_s: nonNegative.max(86_400).default(120),
      /** Consecutive fixes needed to confirm arrival, and outside the exit radius to confirm departure. */
      min_fixes: positiveInt.max(1000).default(3),
      codes: z
        .strictObject({
          pickup_arrive: z.string().min(1).default('X3'),
          pickup_depart: z.string().min(1).default('AF'),
          delivery_arrive: z.string().min(1).default('X1'),
          delivery_depart: z.string().min(1).default('D1'),
          other_arrive: z.string().min(1).default('X1'),
          other_depart: z.string().min(1).default('CD'),
        })
        .prefault({}),
      delay: z
        .strictObject({
          enabled: z.boolean().default(true),
          code: z.string().min(1).default('SD'),
          reason: z.string().min(1).default('NS'),
          /** Delay milestone when the predicted arrival passes the appointment end by more than this. */
          grace_s: nonNegative.default(900),
          /** Another delay milestone only when the predicted delay grew by this much. */
          step_s: z.number().positive().default(1800),
          /** Road distance = straight-line distance x this factor. */
          road_factor: z.number().min(1).max(3).default(1.25),
          /** Speed is averaged over this window of recent fixes. */
          speed_window_s: z.number().positive().default(900),
          /** Below this averaged speed (a fuel stop, a jam) the prediction uses planning_speed_kmh. */
          min_speed_kmh: z.number().positive().default(30),
          planning_speed_kmh: z.number().positive().default(70),
        })
        .prefault({}),
    })
    .prefault({}),
  health: z
    .strictObject({
      /** Loopback address for /healthz and /metrics, e.g. "127.0.0.1:9101"; empty: off. */
      listen: z
        .string()
        .regex(/^$|^(127\.\d+\.\d+\.\d+|localhost|\[::1\]):\d{1,5}$/, 'expected a loopback host:port such as 127.0.0.1:9101, or "" for off')
        .default(''),
      /** A source with no reading for this long makes /healthz unhealthy. */
      source_silent_s: z.number().positive().default(300),
    })
    .prefault({}),
  log: z
    .strictObject({
      level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace']).default('info'),
    })
    .prefault({}),
  sources: z.array(sourceSchema).default([]),
  /** Which reading times are believed (see src/sources/time-guard.ts). Not applied to the simulator. */
  sources_time: z
    .strictObject({
      /** A reading more than this far ahead of the system clock is refused. */
      max_future_s: nonNegative.default(300),
      /** A reading older than this is refused. */
      max_past_days: z.number().positive().default(30),
    })
    .prefault({}),
});

export type Config = z.infer<typeof configSchema>;
export type SourceConfig = z.infer<typeof sourceSchema>;
export type SimulatorSourceConfig = z.infer<typeof simulatorSourceSchema>;
export type GpsdSourceConfig = z.infer<typeof gpsdSourceSchema>;
export type NmeaSourceConfig = z.infer<typeof nmeaSourceSchema>;
export type OnewireSourceConfig = z.infer<typeof onewireSourceSchema>;
export type ExecSourceConfig = z.infer<typeof execSourceSchema>;
export type ModuleSourceConfig = z.infer<typeof moduleSourceSchema>;
