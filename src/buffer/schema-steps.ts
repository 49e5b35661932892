/**
 * The buffer's schema, one step at a time: each entry takes the database from version i to
 * i + 1 (migrations.ts runs them).
 *
 * Self-contained: a step's SQL is written out here as it was when the step shipped, never
 * imported from the code that runs the buffer today (ledger.ts), which may change.
 */
import { randomInt } from 'node:crypto';
import type { DB } from './db.js';

/** A buffer's identity: a random non-zero 31-bit number, kept in the header and in `meta`. */
function randomIdentity(): number {
  return randomInt(1, 2 ** 31 - 1);
}

/** Each entry takes the database from version i to i + 1. Append only; never edit a shipped step. */
export const MIGRATIONS: ReadonlyArray<(db: DB) => void> = [
  // 0 -> 1: readings, loads, milestones, daemon state.
  (db) => {
    db.exec(`
      -- AUTOINCREMENT: ids are never reused after the table drains, because they name
      -- trace points to the service (traceId) and must not repeat.
      CREATE TABLE readings (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        resource_id TEXT    NOT NULL,
        load_number TEXT,
        time_ms     INTEGER NOT NULL,
        lat         REAL,
        lon         REAL,
        speed       REAL,
        heading     REAL,
        odometer    REAL,
        temp_c      REAL,
        source      TEXT
      );
      CREATE INDEX readings_by_load ON readings (load_number, id);
      CREATE INDEX readings_by_resource ON readings (resource_id, id);

      CREATE TABLE loads (
        load_number    TEXT PRIMARY KEY,
        resource_id    TEXT    NOT NULL,
        resource_type  TEXT    NOT NULL,
        stops          TEXT    NOT NULL DEFAULT '[]',
        started_ms     INTEGER NOT NULL,
        ended_ms       INTEGER,
        next_stop      INTEGER,
        last_sample_ms INTEGER
      );
      -- One active load per resource: a reading must belong to exactly one load.
      CREATE UNIQUE INDEX loads_one_active_per_resource ON loads (resource_id) WHERE ended_ms IS NULL;

      CREATE TABLE milestones (
        id          INTEGER PRIMARY KEY,
        load_number TEXT    NOT NULL,
        ref         TEXT    NOT NULL UNIQUE,
        body        TEXT    NOT NULL,
        created_ms  INTEGER NOT NULL,
        attempts    INTEGER NOT NULL DEFAULT 0,
        last_error  TEXT,
        sent_ms     INTEGER
      );
      CREATE INDEX milestones_pending ON milestones (id) WHERE sent_ms IS NULL;

      CREATE TABLE state (
        key        TEXT PRIMARY KEY,
        value      TEXT    NOT NULL,
        updated_ms INTEGER NOT NULL
      );
    `);
  },
  // 1 -> 2: dead letters. A record the service refuses is parked, not deleted and not retried
  // forever: readings get a state (0 waiting, 1 parked, 2 retry requested), milestones a parked time.
  (db) => {
    db.exec(`
      ALTER TABLE readings ADD COLUMN state INTEGER NOT NULL DEFAULT 0;
      ALTER TABLE milestones ADD COLUMN parked_ms INTEGER;
      DROP INDEX milestones_pending;
      CREATE INDEX milestones_pending ON milestones (id) WHERE sent_ms IS NULL AND parked_ms IS NULL;
      CREATE INDEX readings_parked ON readings (state) WHERE state <> 0;
      CREATE TABLE dead_letters (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        kind        TEXT    NOT NULL CHECK (kind IN ('milestone', 'trace')),
        load_number TEXT    NOT NULL,
        record_id   INTEGER NOT NULL,
        status      INTEGER,
        response    TEXT,
        body        TEXT    NOT NULL,
        created_ms  INTEGER NOT NULL
      );
      CREATE TABLE counters (
        name  TEXT PRIMARY KEY,
        value INTEGER NOT NULL
      );
    `);
  },
  // 2 -> 3: geofence and delay state per (load, stop), so detection survives a restart.
  (db) => {
    db.exec(`
      CREATE TABLE stop_state (
        load_number       TEXT    NOT NULL,
        stop_sequence     INTEGER NOT NULL,
        state             TEXT    NOT NULL DEFAULT 'outside',
        first_inside_ms   INTEGER,
        last_inside_ms    INTEGER,
        inside_fixes      INTEGER NOT NULL DEFAULT 0,
        outside_fixes     INTEGER NOT NULL DEFAULT 0,
        arrived_ms        INTEGER,
        departed_ms       INTEGER,
        delay_reported_s  INTEGER,
        PRIMARY KEY (load_number, stop_sequence)
      );
    `);
  },
  // 3 -> 4: acknowledgement by cursor. A delivered chunk moves its load's acked_id instead of
  // deleting its rows at once: the rows of 200 interleaved loads sit on shared pages, and a
  // DELETE per chunk rewrote about one page per reading (8 KB written per reading delivered).
  // Rows at or below the cursor are purged later in bulk (Store.purgeAcked).
  // The resource index goes: it was read only to find a resource's last position for a manual
  // milestone, and kept up on every insert and delete it cost a quarter of the buffer's writes.
  (db) => {
    db.exec(`
      ALTER TABLE loads ADD COLUMN acked_id INTEGER NOT NULL DEFAULT 0;
      DROP INDEX readings_by_resource;
    `);
  },
  // 4 -> 5: what a field device needs to trust its buffer and its events.
  // - meta: the buffer's identity (also in the header's application_id), checked at every open
  //   so a -wal file of another database is never applied silently.
  // - last_fix: the newest position of each resource, kept when its readings are purged, so a
  //   milestone recorded after a push still knows where the truck is.
  // - milestones: the event's code, stop and origin as columns (one per load, code and stop),
  //   and the service's last answer and correlation id.
  // - dead_letters: the answer's headers; loads: the correlation id of the last trace request.
  (db) => {
    const appId = randomIdentity();
    db.exec(`
      CREATE TABLE meta (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
      );
      CREATE TABLE last_fix (
        resource_id TEXT PRIMARY KEY,
        time_ms     INTEGER NOT NULL,
        lat         REAL    NOT NULL,
        lon         REAL    NOT NULL,
        speed       REAL,
        heading     REAL
      );
      INSERT INTO last_fix (resource_id, time_ms, lat, lon, speed, heading)
        SELECT r.resource_id, r.time_ms, r.lat, r.lon, r.speed, r.heading
          FROM readings r JOIN (SELECT max(id) AS id FROM readings WHERE lat IS NOT NULL GROUP BY resource_id) n ON n.id = r.id;
      ALTER TABLE milestones ADD COLUMN code TEXT;
      ALTER TABLE milestones ADD COLUMN stop_seq INTEGER;
      ALTER TABLE milestones ADD COLUMN origin TEXT;
      ALTER TABLE milestones ADD COLUMN needs_place INTEGER NOT NULL DEFAULT 0;
      ALTER TABLE milestones ADD COLUMN last_status INTEGER;
      ALTER TABLE milestones ADD COLUMN correlation_id TEXT;
      UPDATE milestones SET code = json_extract(body, '$.eventCode'), stop_seq = json_extract(body, '$.stopsequenceNumber');
      CREATE INDEX milestones_by_event ON milestones (load_number, code, stop_seq);
      ALTER TABLE dead_letters ADD COLUMN headers TEXT;
      ALTER TABLE loads ADD COLUMN correlation_id TEXT;
    `);
    db.prepare("INSERT INTO meta (key, value) VALUES ('identity', ?)").run(String(appId));
    db.pragma(`application_id = ${appId}`);
  },
  // 5 -> 6: a commit of readings writes only the readings and their index. At 1 Hz with a
  // commit every 5 s, two of the six pages each commit wrote (1 KB each) were bookkeeping:
  // sqlite_sequence (AUTOINCREMENT updates it on every insert) and last_fix (an upsert per
  // commit). Both are now written when they must be, and read as if written every time:
  // - Reading ids: AUTOINCREMENT goes from the table's definition (the table's pages are the
  //   same with or without it: a change SQLite's ALTER TABLE page allows through
  //   writable_schema). The buffer gives each reading max(id, sqlite_sequence.seq) + 1
  //   (NEXT_READING_ID, ledger.ts), and a trigger raises seq when the newest reading is
  //   deleted, so an id is still never used twice, even after the table drains.
  // - last_fix holds the newest fix up to reading `last_fix_upto` (meta), brought forward once
  //   a minute (Readings.flushFixes) and, by a trigger, from any newer reading deleted before
  //   then. The view newest_fix adds the readings after it: the same answer as before.
  (db) => {
    const version = db.pragma('schema_version', { simple: true }) as number;
    db.unsafeMode(true);
    try {
      db.pragma('writable_schema = ON');
      db.prepare("UPDATE sqlite_schema SET sql = replace(sql, 'INTEGER PRIMARY KEY AUTOINCREMENT', 'INTEGER PRIMARY KEY') WHERE type = 'table' AND name = 'readings'").run();
      db.pragma(`schema_version = ${version + 1}`);
      db.pragma('writable_schema = OFF');
    } finally {
      db.unsafeMode(false);
    }
    db.exec(`
      INSERT INTO sqlite_sequence (name, seq) SELECT 'readings', coalesce((SELECT max(id) FROM readings), 0)
        WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'readings');
      CREATE TRIGGER readings_keep_seq AFTER DELETE ON readings
        WHEN old.id > coalesce((SELECT max(id) FROM readings), 0)
      BEGIN
        UPDATE sqlite_sequence SET seq = old.id WHERE name = 'readings' AND seq < old.id;
      END;

      INSERT INTO meta (key, value) VALUES ('last_fix_upto', (SELECT coalesce(max(id), 0) FROM readings));
      CREATE TRIGGER readings_keep_fix AFTER DELETE ON readings
        WHEN old.lat IS NOT NULL AND old.lon IS NOT NULL
         AND old.id > (SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'last_fix_upto')
      BEGIN
        INSERT INTO last_fix (resource_id, time_ms, lat, lon, speed, heading)
          VALUES (old.resource_id, old.time_ms, old.lat, old.lon, old.speed, old.heading)
          ON CONFLICT (resource_id) DO UPDATE SET time_ms = excluded.time_ms, lat = excluded.lat, lon = excluded.lon,
            speed = excluded.speed, heading = excluded.heading WHERE excluded.time_ms >= last_fix.time_ms;
      END;
      CREATE VIEW newest_fix AS
        SELECT resource_id, max(time_ms) AS time_ms, lat, lon, speed, heading FROM (
          SELECT resource_id, time_ms, lat, lon, speed, heading FROM last_fix
          UNION ALL
          SELECT resource_id, time_ms, lat, lon, speed, heading FROM readings
           WHERE id > (SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'last_fix_upto')
             AND lat IS NOT NULL AND lon IS NOT NULL
        ) GROUP BY resource_id;
    `);
  },
  // 6 -> 7: several loads on one resource (LTL, consolidated multi-stop routes). A reading
  // belongs to its resource and is stored once; a load is a resource and a window, and takes
  // every reading of the resource inside it. The window is by reading time (window_from_ms to
  // window_until_ms) and by id: above the cursor (acked_id, the highest id when the load
  // started), and, once the load has ended and the daemon committed what it held from before
  // the end, no higher than end_id. A row goes once every load whose window holds it has its
  // cursor past it.
  // - Loads of this buffer keep exactly their readings: a resource had one active load at a
  //   time and a reading took the load active when it was committed, so a load's readings are
  //   the resource's readings between its first and its last id. The cursor moves up to its
  //   first reading, end_id is its last, and the time window widens to hold the readings a
  //   commit took just before `load start` or just after `load end`.
  // - Readings of no load (privacy.record_without_load) get state 3 (unassigned): no window
  //   holds them, and they stay until a limit drops them, as before.
  // - What a dead letter holds is per load now (load_marks): a point one load's request had
  //   refused may still be due to another load. The reading itself is held (state 1) while a
  //   dead letter or a retry of any load needs it.
  // - load_number of a reading is no longer written (left in place: dropping it would rewrite
  //   every row on the card); readings_by_load gives way to readings_by_resource.
  // (The highest id ever given, purged or not, is written out as it was when this step shipped.)
  (db) => {
    db.exec(`
      ALTER TABLE loads ADD COLUMN window_from_ms INTEGER NOT NULL DEFAULT 0;
      ALTER TABLE loads ADD COLUMN window_until_ms INTEGER;
      ALTER TABLE loads ADD COLUMN end_id INTEGER;
      CREATE TEMP TABLE own_readings AS
        SELECT load_number, min(id) AS lo, max(id) AS hi, min(time_ms) AS t0, max(time_ms) AS t1
          FROM readings WHERE load_number IS NOT NULL GROUP BY load_number;
      UPDATE loads SET
        acked_id = max(acked_id, coalesce((SELECT lo - 1 FROM own_readings o WHERE o.load_number = loads.load_number), (SELECT max(coalesce((SELECT max(id) FROM readings), 0), coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'readings'), 0))))),
        window_from_ms = min(started_ms, coalesce((SELECT t0 FROM own_readings o WHERE o.load_number = loads.load_number), started_ms)),
        window_until_ms = CASE WHEN ended_ms IS NULL THEN NULL
          ELSE max(ended_ms, coalesce((SELECT t1 + 1 FROM own_readings o WHERE o.load_number = loads.load_number), ended_ms)) END,
        end_id = CASE WHEN ended_ms IS NULL THEN NULL
          ELSE coalesce((SELECT hi FROM own_readings o WHERE o.load_number = loads.load_number), (SELECT max(coalesce((SELECT max(id) FROM readings), 0), coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'readings'), 0)))) END;
      DROP TABLE own_readings;

      CREATE TABLE load_marks (
        load_number TEXT    NOT NULL,
        reading_id  INTEGER NOT NULL,
        state       INTEGER NOT NULL,
        PRIMARY KEY (load_number, reading_id)
      ) WITHOUT ROWID;
      CREATE INDEX load_marks_by_reading ON load_marks (reading_id);
      INSERT INTO load_marks (load_number, reading_id, state)
        SELECT load_number, id, state FROM readings WHERE state IN (1, 2) AND load_number IS NOT NULL;
      UPDATE readings SET state = 1 WHERE state = 2;
      UPDATE readings SET state = 3 WHERE load_number IS NULL AND state = 0;

      DROP INDEX loads_one_active_per_resource;
      CREATE INDEX loads_undone ON loads (resource_id) WHERE end_id IS NULL OR acked_id < end_id;
      DROP INDEX readings_by_load;
      CREATE INDEX readings_by_resource ON readings (resource_id, id);
    `);
    // Ended loads with nothing left to send are done: their cursor goes to their last id.
    db.exec(`
      UPDATE loads AS l SET acked_id = l.end_id
       WHERE l.end_id IS NOT NULL AND l.acked_id < l.end_id AND NOT EXISTS (
         SELECT 1 FROM readings r WHERE r.resource_id = l.resource_id AND r.id > l.acked_id AND r.id <= l.end_id
            AND r.time_ms >= l.window_from_ms AND r.time_ms < l.window_until_ms
            AND NOT EXISTS (SELECT 1 FROM load_marks m WHERE m.load_number = l.load_number AND m.reading_id = r.id));
    `);
  },
  // 7 -> 8: a trace request is fixed before it is sent. Its readings (the cursor it starts
  // after and the one it leaves, the sampling point before it, its points' ids) and its
  // Idempotency-Key are recorded first; every retry, after a lost answer, a timeout or a
  // restart, sends exactly those points under that key until an answer settles it. Without
  // it a retry was built again up to the newest reading and carried more points under a new
  // key, which a service that deduplicates by key stored twice. One row per load and kind
  // (its next chunk, or its newest position sent ahead of a backlog).
  (db) => {
    db.exec(`
      CREATE TABLE requests (
        load_number    TEXT    NOT NULL,
        kind           TEXT    NOT NULL CHECK (kind IN ('chunk', 'newest')),
        after_id       INTEGER NOT NULL,
        last_id        INTEGER NOT NULL,
        last_sample_ms INTEGER,
        point_ids      TEXT    NOT NULL,
        idem_key       TEXT,
        fixed_ms       INTEGER NOT NULL,
        PRIMARY KEY (load_number, kind)
      ) WITHOUT ROWID;
    `);
  },
  // 8 -> 9: a reading copied by `buffer salvage` keeps the traceId it had in the old buffer,
  // though it gets a new id here: the service has seen it under that name (a request lost on
  // the way, a dead letter), and a repeat must look like one. NULL for every other reading
  // (the traceId is the device and the id): one byte a row, no rewrite of the table.
  (db) => {
    db.exec('ALTER TABLE readings ADD COLUMN trace_id TEXT;');
  },
  // 9 -> 10: a trace request the service refuses as a whole (every part of it, the same answer)
  // is one dead letter, not one per point: record_ids lists every reading it parks (a JSON
  // array, record_id its first); NULL for a dead letter of one record, as before.
  (db) => {
    db.exec('ALTER TABLE dead_letters ADD COLUMN record_ids TEXT;');
  },
  // 10 -> 11: a temperature-only reading (a parked reefer's 1-Wire sensor, no fix) is placed at
  // the resource's newest fix before it. A load keeps that fix as of its cursor (fix_ms,
  // fix_lat, fix_lon), written with each acknowledgement: the fix's own row is purged once
  // delivered, long before the temperatures after it go. Loads not yet done take the newest
  // fix at or below their cursor still in the buffer, else the resource's last fix if it is
  // no newer than the first reading after the cursor.
  (db) => {
    db.exec(`
      ALTER TABLE loads ADD COLUMN fix_ms INTEGER;
      ALTER TABLE loads ADD COLUMN fix_lat REAL;
      ALTER TABLE loads ADD COLUMN fix_lon REAL;
      UPDATE loads AS l SET (fix_ms, fix_lat, fix_lon) = (
        SELECT time_ms, lat, lon FROM (
          SELECT 1 AS k, time_ms, lat, lon FROM (
            SELECT r.time_ms, r.lat, r.lon FROM readings r
             WHERE r.resource_id = l.resource_id AND r.id <= l.acked_id AND r.lat IS NOT NULL AND r.lon IS NOT NULL ORDER BY r.id DESC LIMIT 1)
          UNION ALL
          SELECT 2, f.time_ms, f.lat, f.lon FROM last_fix f
           WHERE f.resource_id = l.resource_id AND f.time_ms <= coalesce(
             (SELECT r.time_ms FROM readings r WHERE r.resource_id = l.resource_id AND r.id > l.acked_id ORDER BY r.id LIMIT 1), f.time_ms))
        ORDER BY k LIMIT 1)
       WHERE l.end_id IS NULL OR l.acked_id < l.end_id;
    `);
  },
  // 11 -> 12: where each resource was, kept after its readings are purged, so a milestone typed
  // hours after the event is placed where the truck was then (history.ts): one row per
  // resource per interval, integers only (time in s, degrees x 1e5, about 1 m), keyed by
  // resource and time with no rowid: about 32 bytes a row in its pages. The fixes the buffer
  // holds now are copied in, one a minute (the default history.interval_s), so the positions
  // of readings not yet delivered outlive them too.
  (db) => {
    db.exec(`
      CREATE TABLE positions (
        resource_id TEXT    NOT NULL,
        t_s         INTEGER NOT NULL,
        lat_e5      INTEGER NOT NULL,
        lon_e5      INTEGER NOT NULL,
        PRIMARY KEY (resource_id, t_s)
      ) WITHOUT ROWID;
      INSERT OR IGNORE INTO positions (resource_id, t_s, lat_e5, lon_e5)
        SELECT resource_id, min(time_ms) / 1000, CAST(round(lat * 100000) AS INTEGER), CAST(round(lon * 100000) AS INTEGER)
          FROM readings WHERE lat IS NOT NULL AND lon IS NOT NULL GROUP BY resource_id, time_ms / 60000;
    `);
  },
  // 12 -> 13 (fleet commands): each command dispatch sent over the fleet link, by its id, with
  // the answer it got, written in the same commit as what it did: a broker's redelivery or a
  // restart is answered again with that answer, and the command is never applied twice.
  (db) => {
    db.exec(`
      CREATE TABLE fleet_commands (
        command_id  TEXT    PRIMARY KEY,
        name        TEXT    NOT NULL,
        answer      TEXT    NOT NULL,
        received_ms INTEGER NOT NULL
      ) WITHOUT ROWID;
    `);
  },
  // 13 -> 14: a fixed request counts the temperature-only readings it passes unsent (dropped).
  // The column was first added to step 7 -> 8 after that step had shipped, so the buffers made
  // before (0.1.0 up to schema 10) never got it and the upgraded agent died at every start; the
  // buffers made since have it. Added here where it is missing.
  (db) => {
    const has = (db.prepare('PRAGMA table_info(requests)').all() as Array<{ name: string }>).some((c) => c.name === 'dropped');
    if (!has) db.exec('ALTER TABLE requests ADD COLUMN dropped INTEGER NOT NULL DEFAULT 0;');
  },
];
