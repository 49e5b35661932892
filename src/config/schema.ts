/**
 * The one home of configuration and its defaults. The TOML file uses snake_case keys;
 * everything the agent reads of its configuration comes out of `configSchema.parse`.
 * Unknown keys are errors (a misspelt key silently falling back to a default is how a
 * device ends up sending to the wrong place for a month).
 */
import * as z from 'zod';
import { cronProblem } from '../cron.js';
import { DEFAULT_LOAD_NUMBER_PATTERN, EVENT_CODES, REASON_CODES } from '../milestones/codes.js';
import { fleetSchema } from './fleet.js';
import { nonNegative, positiveInt, sourceSchema, waitS } from './sources.js';
import { clockSchema, historySchema, odometerSchema, sourcesTimeSchema } from './time-place.js';
import { uiSchema } from './ui.js';

export * from './sources.js';

/** An event or reason code: letters and digits, upper-cased (`x3` is `X3`). */
const code = z
  .string()
  .regex(/^[A-Za-z0-9]{1,10}$/, 'expected a code of 1-10 letters and digits')
  .transform((c) => c.toUpperCase());

/**
 * The unit's TimeoutStopSec (systemd/telematics-agent.service; a test keeps the two equal).
 * The agent must be gone before systemd kills it, so its own stop is bounded below this.
 */
export const UNIT_TIMEOUT_STOP_S = 45;

/**
 * Settings that take effect only at the next start; a reload (SIGHUP) names them when they
 * changed. Everything else is applied by the reload itself.
 */
const restart = <T extends z.ZodType>(schema: T): T => schema.meta({ restart: true });

export const configSchema = z
  .strictObject({
    /**
     * Names this device in logs, trace references and the trace splay. Default: the host name
     * and the first 8 hex digits of /etc/machine-id (thousands of devices are called raspberrypi).
     */
    device_id: restart(z.string().min(1).max(64).optional()),
    api: z.strictObject({
      base_url: z.url({ protocol: /^https?$/, error: 'expected an http:// or https:// URL' }).default('http://127.0.0.1:8787'),
      milestone_path: z.string().startsWith('/').default('/rcsc/events/v1/loads/milestone-requests'),
      trace_path: z.string().startsWith('/').default('/rcsc/events/v1/loads/trace-requests'),
      /** The carrier's SCAC code, sent in the carrierSCAC header. */
      scac: z.string().regex(/^[A-Z]{2,4}$/, 'expected a 2-4 letter SCAC code in capitals'),
      /** File holding the subscription key (preferred; 0600). */
      subscription_key_file: z.string().min(1).optional(),
      /** Inline key: allowed, warned about (config files get copied around). */
      subscription_key: z.string().min(1).optional(),
      /** The answer's headers not there this long after the request began, or its body silent this long: the request failed. */
      timeout_s: z.number().positive().max(600).default(30),
      /** Giving up on a connection (name lookup, TCP and TLS handshakes) after this long. */
      connect_timeout_s: z.number().positive().max(600).default(10),
      /**
       * The HTTP(S) proxy for the service: unset, HTTPS_PROXY / HTTP_PROXY / NO_PROXY from
       * the environment; "direct", none whatever the environment says.
       */
      proxy: z.union([z.literal('direct'), z.url({ protocol: /^https?$/, error: 'expected "direct" or an http:// or https:// proxy URL' })]).optional(),
      /** PEM file of a private CA trusted besides the public ones (a proxy inspecting TLS). */
      ca_file: z.string().min(1).optional(),
      /** `local`: the spec's local time with offset; `utc`: `YYYY-MM-DDTHH:MM:SSZ`. */
      date_time_format: z.enum(['local', 'utc']).default('local'),
      /** unitOfMeasure of trace temperatures; readings are converted. */
      temperature_unit: z.enum(['C', 'F']).default('C'),
      /** Fixed top-level fields added to every body, e.g. { source = "carrier" }. */
      extra_fields: z.record(z.string(), z.union([z.string(), z.number(), z.boolean()])).default({}),
      /**
       * Load numbers the service accepts (a regular expression for the whole number), checked by
       * `load start` and `milestone` so a bad one fails on the truck, not as a dead letter.
       */
      load_number_pattern: z
        .string()
        .superRefine((p, ctx) => {
          try {
            new RegExp(p);
          } catch (err) {
            ctx.addIssue({ code: 'custom', message: `expected a regular expression (${(err as Error).message})` });
          }
        })
        .default(DEFAULT_LOAD_NUMBER_PATTERN),
      /** Where a 2xx answer carries the service's correlation id: a body field, else a header. */
      correlation_id_field: z.string().min(1).default('correlationId'),
      correlation_id_header: z.string().min(1).toLowerCase().default('x-correlation-id'),
      /**
       * `gzip`: request bodies of compress_min_bytes or more sent with Content-Encoding gzip
       * (some 5-8x smaller). Off by default, as the spec says nothing of it; a service that
       * refuses it (415, or a 400 naming the encoding) turns it off until the next start or reload.
       */
      compress: z.enum(['none', 'gzip']).default('none'),
      compress_min_bytes: z.number().int().nonnegative().max(10_485_760).default(1024),
      /**
       * `lean`: the ClientHello offers TLS 1.3 and forward-secret AEAD suites of TLS 1.2 only
       * (src/api/tls-hello.ts, some 120 B less at every connection); `node`: Node's own offer,
       * for a service or TLS-inspecting proxy that needs a suite outside it.
       */
      tls_hello: z.enum(['lean', 'node']).default('lean'),
    }),
    buffer: z
      .strictObject({
        path: restart(z.string().min(1).default('/var/lib/telematics-agent/buffer.db')),
        /**
         * A buffer SQLite finds corrupt: `stop` (exit 65, nothing touched) or `move-aside`
         * (renamed to <path>.corrupt-<time> with its -wal and -shm, a fresh one started; the old
         * one is kept for `telematics-agent buffer salvage`).
         */
        on_corrupt: restart(z.enum(['stop', 'move-aside']).default('stop')),
        /**
         * Room (KiB) kept in `<path>.reserve` for acknowledging and purging when the disk is full
         * (at most an eighth of the file system); 0: none.
         */
        reserve_kb: restart(z.number().int().nonnegative().max(1_048_576).default(2048)),
        /**
         * Readings waiting in memory while they cannot be committed (a full disk); past this the
         * oldest pending ones are dropped and counted.
         */
        max_pending: positiveInt.max(10_000_000).default(20_000),
        /**
         * SQLite synchronous level in WAL mode. FULL: every commit is on the disk when it
         * returns, so a power cut costs at most flush_interval_ms of readings. NORMAL: commits
         * reach the disk when the kernel writes them out (usually within 30 s) or the agent
         * syncs (before every request): a cut can also take back recent commits. Neither
         * corrupts the file. At the default interval both write about the same to flash.
         */
        synchronous: z.enum(['OFF', 'NORMAL', 'FULL']).default('FULL'),
        /**
         * SQLite page cache, KiB. Reads walk an index in order, so a big cache buys little and
         * costs RSS on a 512 MB device (better-sqlite3 alone would take 16 MiB).
         */
        cache_kb: positiveInt.min(256).max(1_048_576).default(2048),
        /** Readings are committed together every flush_interval_ms or when this many wait. */
        batch_size: positiveInt.max(100_000).default(500),
        /**
         * 90 s: each commit dirties some 20-40 KB of the card whatever it holds (the WAL's last
         * page, the -shm index), so the interval sets what a reading costs the card: at 1 Hz
         * with FULL about 700 B per reading at 90 s, 1,060 B at 60 s (docs/performance.md,
         * rows 5 and 5a). A crash or a power cut loses at most these seconds of readings;
         * milestone detection does not wait for the commit.
         */
        flush_interval_ms: positiveInt.max(300_000).default(90_000),
        /** Size cap of the buffer's data (MB). Past it the oldest readings go first; milestones never. */
        max_size_mb: z.number().positive().default(512),
        /** Readings older than this are dropped (counted and logged); milestones never. */
        max_age_days: z.number().positive().default(30),
      })
      .prefault({}),
    schedule: z
      .strictObject({
        /** Cron expression (node-cron: 5 fields, or 6 with seconds) for trace pushes, in the machine's local time. */
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
    traces: z
      .strictObject({
        /**
         * A temperature-only reading of a load (a parked reefer's 1-Wire sensor, no fix for a
         * sampling interval before it): `last_fix` sends it as a point at the resource's last
         * fix before it, if that fix is within milestones.max_fix_age_s of its time; otherwise,
         * or with `drop`, it is acknowledged unsent and counted as dropped. Never left waiting.
         */
        temperature_without_fix: z.enum(['last_fix', 'drop']).default('last_fix'),
        /**
         * `trace-id`: each point carries references = [{ name = "traceId", value = "<device>-<id>" }]
         * (some 60 B a point): the service can drop a point it already has and name a refused
         * one. `none`: not sent (the spec does not ask for it).
         */
        references: z.enum(['trace-id', 'none']).default('trace-id'),
      })
      .prefault({}),
    delivery: z
      .strictObject({
        max_traces_per_request: positiveInt.max(10_000).default(500),
        /** How often the daemon looks for milestones recorded by other processes (the CLI). */
        poll_interval_ms: positiveInt.max(60_000).default(1000),
        retry_initial_s: waitS.default(5),
        retry_max_s: waitS.default(900),
        /**
         * Longest wait after a failure where no answer came (refused, reset, DNS, unreachable,
         * connect timeout): a connection attempt costs the service nothing, and coverage may be back.
         */
        reconnect_max_s: waitS.default(30),
        /** Longest wait a Retry-After may impose. */
        retry_after_max_s: waitS.default(3600),
        /** Retry interval while the service refuses the key, SCAC or path (401/403/404). */
        auth_retry_s: waitS.default(300),
        /** Pause between trace requests while a backlog drains. */
        drain_interval_ms: nonNegative.max(60_000).default(50),
        /**
         * From SIGTERM to exit, at most (an in-flight request is abandoned before, and kept for the
         * next start). Below the unit's TimeoutStopSec, or systemd kills the agent mid-stop.
         */
        shutdown_timeout_s: z
          .number()
          .positive()
          .refine((v) => v < UNIT_TIMEOUT_STOP_S, `expected a number below ${UNIT_TIMEOUT_STOP_S}, the unit's TimeoutStopSec (systemd kills the agent then)`)
          .default(20),
        /** 409 Conflict to a record already sent: the service has it; counted as delivered (a duplicate). */
        conflict_is_delivered: z.boolean().default(true),
      })
      .superRefine((d, ctx) => {
        // A backoff that starts above its ceiling is a typo, most often of units.
        if (d.retry_initial_s > d.retry_max_s) ctx.addIssue({ code: 'custom', path: ['retry_initial_s'], message: `expected at most retry_max_s (${d.retry_max_s}), got ${d.retry_initial_s}` });
      })
      .prefault({}),
    loads: z
      .strictObject({
        /**
         * A reading stamped inside an ended load's window that arrives this long after `load end`
         * (an MQTT persistent session replayed, a gateway uploading its backlog) is still the
         * load's and is sent; later, it is dropped and counted. 0: none is after the end's commit.
         */
        late_readings_s: nonNegative.max(7 * 86_400).default(21_600),
        /**
         * Readings of a resource with no active load are kept this long (unsent), so a load
         * started late (`load start --from`, the fleet's `from`) takes them. 0: discarded at once.
         */
        keep_unassigned_s: nonNegative.max(7 * 86_400).default(3600),
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
        default_reason: code.default('NS'),
        /** Codes whose milestone means "left the stop": the next stop becomes the trace's stopsequenceNumber. */
        departure: z.array(code).default(['AF', 'D1', 'CD']),
        /** Event codes the service accepts (X12 214 AT7-01); others are refused unless forced. */
        events: z.array(code).default(Object.keys(EVENT_CODES)),
        /** Reason codes the service accepts (X12 214 AT7-02); others are refused unless forced. */
        reasons: z.array(code).default(Object.keys(REASON_CODES)),
        /** Codes whose time is an appointment, which may lie in the future. */
        appointments: z.array(code).default(['AA', 'AB']),
        /** Codes a load may carry more than once for the same stop (delays, en route, changed appointments). */
        repeatable: z.array(code).default(['SD', 'X6', 'AG', 'AA', 'AB']),
        /** Replaced by `events` and `reasons`; still read (with a warning) so an old config keeps working. */
        known: z.array(code).optional(),
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
        /** A milestone without a place of its own takes the resource's last fix if taken at most this long from its time (from now, for an appointment). */
        max_fix_age_s: nonNegative.max(7 * 86_400).default(1800),
        codes: z
          .strictObject({
            pickup_arrive: code.default('X3'),
            pickup_depart: code.default('AF'),
            delivery_arrive: code.default('X1'),
            delivery_depart: code.default('D1'),
            other_arrive: code.default('X1'),
            other_depart: code.default('CD'),
          })
          .prefault({}),
        delay: z
          .strictObject({
            enabled: z.boolean().default(true),
            code: code.default('SD'),
            reason: code.default('NS'),
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
    /** Where each resource was, kept after its readings are delivered (src/buffer/history.ts). */
    history: historySchema,
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
    /** The driver's page (src/config/ui.ts): off unless `ui.listen` is set. */
    ui: uiSchema,
    log: z
      .strictObject({
        level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace']).default('info'),
      })
      .prefault({}),
    sources: z
      .array(sourceSchema)
      .superRefine((a, ctx) => {
        if (a.length === 0) ctx.addIssue({ code: 'custom', message: 'expected at least one [[sources]] table: an agent without a source collects nothing' });
        // A persistent session is found again by its client id: with one MQTT source it is the
        // device's; with several, each needs a name of its own that does not move when the
        // list is edited (a position would hand one source's session to another).
        const mqtt = a.flatMap((s, i) => (s.type === 'mqtt' ? [{ s, i }] : []));
        if (mqtt.length > 1) {
          for (const { s, i } of mqtt) {
            if (s.client_id === undefined && s.name === undefined) {
              ctx.addIssue({ code: 'custom', path: [i, 'client_id'], message: 'several MQTT sources: give each a client_id (or a name), the broker keeps each session under it' });
            }
          }
        }
      })
      .prefault([]),
    /** The GNSS odometer of sources with `odometer = "gnss"` (src/admission/odometer.ts). */
    odometer: odometerSchema,
    /** The system clock's standing, and GNSS time while it is not synchronised (src/gnss-clock.ts). */
    clock: clockSchema,
    /** Which reading times are believed (see src/admission/time-guard.ts). Not applied to the simulator. */
    sources_time: sourcesTimeSchema,
    /** The link to the carrier's MQTT broker (src/config/fleet.ts, docs/fleet.md); off when absent. */
    fleet: fleetSchema.optional(),
  })
  .superRefine((c, ctx) => {
    // The codes the agent sends by itself must be on the lists the CLI checks against.
    const events = new Set([...c.codes.events, ...(c.codes.known ?? [])]);
    const reasons = new Set([...c.codes.reasons, ...(c.codes.known ?? [])]);
    const need = (ok: boolean, path: PropertyKey[], what: string, list: string) => {
      if (!ok) ctx.addIssue({ code: 'custom', path, message: `${what} is not in codes.${list}; add it there` });
    };
    for (const [k, v] of Object.entries(c.milestones.codes)) need(events.has(v), ['milestones', 'codes', k], v, 'events');
    need(events.has(c.milestones.delay.code), ['milestones', 'delay', 'code'], c.milestones.delay.code, 'events');
    need(reasons.has(c.milestones.delay.reason), ['milestones', 'delay', 'reason'], c.milestones.delay.reason, 'reasons');
    need(reasons.has(c.codes.default_reason), ['codes', 'default_reason'], c.codes.default_reason, 'reasons');
    // One client id, one session at a broker: the fleet link and an MQTT source under the same one would throw each other out.
    const mqtt = c.sources.filter((s) => s.type === 'mqtt');
    const clientIdOf = (s: (typeof mqtt)[number]) => s.client_id ?? (mqtt.length > 1 ? `-${s.name}` : '');
    if (c.fleet && mqtt.some((s) => clientIdOf(s) === (c.fleet?.client_id ?? ''))) {
      ctx.addIssue({ code: 'custom', path: ['fleet', 'client_id'], message: 'the same client id as an MQTT source: give the fleet link a client_id of its own (the broker keeps one session per client id)' });
    }
    // The default prefix is fleet/<device_id>: a wildcard in it made every publish fail and the broker close the link, with no word of why.
    if (c.fleet && c.fleet.topic_prefix === undefined && c.device_id !== undefined && /[+#\0]/.test(c.device_id)) {
      ctx.addIssue({ code: 'custom', path: ['device_id'], message: `expected no + or # with [fleet] and no fleet.topic_prefix: the link's topics are fleet/<device_id>, got ${JSON.stringify(c.device_id)}` });
    }
  });

export type Config = z.infer<typeof configSchema>;

/** Dotted paths of the settings marked as needing a restart (see `restart` above). */
export function restartSettings(schema: z.ZodType = configSchema, prefix = ''): string[] {
  const out: string[] = [];
  const walk = (node: z.ZodType, path: string): void => {
    if ((node.meta() as { restart?: boolean } | undefined)?.restart) {
      out.push(path);
      return;
    }
    const def = (node as unknown as { _zod: { def: { type: string; innerType?: z.ZodType; in?: z.ZodType; shape?: Record<string, z.ZodType> } } })._zod.def;
    if (def.type === 'object' && def.shape) {
      for (const [k, v] of Object.entries(def.shape)) walk(v, path ? `${path}.${k}` : k);
    } else if (def.innerType) walk(def.innerType, path);
    else if (def.type === 'pipe' && def.in) walk(def.in, path);
  };
  walk(schema, prefix);
  return out;
}
