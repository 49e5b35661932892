/**
 * Dispatch's commands, read, checked and applied once. A command goes through the same checks
 * and the same buffer writes as its CLI counterpart (`load start|end`, `milestone`), and its
 * answer is written in the same commit as what it did, keyed by its commandId: the same id
 * again (a broker's redelivery, a restart before the PUBACK, dispatch retrying) gets that
 * first answer and changes nothing. The caller acknowledges the message only after this
 * returns, so what was acknowledged is on the disk.
 *
 * An answer carries the exit status the CLI would give: 0 done; 64 (EX_USAGE) not a command
 * (not JSON, too large, an unknown name, fields missing or of the wrong kind); 65 (EX_DATAERR)
 * refused as the CLI refuses it (load number pattern, codes, unknown load, stops); these are
 * final and kept. A failure to commit (a full disk, a buffer error) is answered with its own
 * status, is not kept, and the same command may be sent again.
 *
 * An id is kept COMMAND_RETENTION_MS after the broker last handed it over (see `prune`).
 */
import type { Store } from '../buffer/store.js';
import type { Config } from '../config/schema.js';
import { AgentError } from '../errors.js';
import { EXIT } from '../exit.js';
import { describeStart, startLoadChecked } from '../milestones/assign.js';
import { recordMilestone } from '../milestones/record.js';
import { check, problemLine } from '../validation.js';
import { COMMANDS, type CommandName, commandIdSchema, type Reply } from './messages.js';
import { dispatchWords } from './refusal.js';
import { withWarnings } from './warnings.js';

/** What a command that was applied asks of the daemon afterwards. */
export interface Effects {
  /** A milestone waits: send it now rather than at the next poll. */
  kick?: boolean;
  /** Publish the status now. */
  status?: boolean;
}

export interface Handled {
  reply: Reply;
  /** The answer given before to the same id. */
  repeated: boolean;
  effects: Effects;
}

/**
 * How long a command id is remembered after it was last received. MQTT hands a command over
 * again only (a) when a session resumes after a connection lost before its PUBACK, at that
 * reconnect however late (MQTT 3.1.1 keeps a session for ever; 5 as long as its expiry, 7
 * days here); (b) as a retained message (dispatch's mistake), at every subscription, i.e.
 * every connect, for as long as the broker keeps it: MQTT 5's message expiry goes up to
 * 2^32-1 s, 3.1.1 has none; (c) when dispatch sends the same id again. No age exceeds (a) and
 * (b), so the link prunes only on a connection whose subscription has been up a while (by
 * then the broker has resent what it had in flight and its retained commands, and each one
 * seen again was refreshed), never while offline. The age is for (c): well past a dispatch
 * retry (`fleet send --timeout` is at most a day) and the 7-day session one may wait in.
 */
export const COMMAND_RETENTION_MS = 30 * 86_400_000;

const refuse = (commandId: string | null, status: number, message: string): Reply => ({ commandId, ok: false, status, message });

/** The commandId of a message that cannot be read whole (too large, not JSON), if one is plainly there. */
export function sniffCommandId(payload: Buffer): string | null {
  const m = /"commandId"\s*:\s*"([^"\\]{1,128})"/.exec(payload.subarray(0, 4096).toString('utf8'));
  return m && commandIdSchema.safeParse(m[1]).success ? m[1] : null;
}

export class Commands {
  constructor(
    private readonly store: Store,
    private readonly config: () => Config,
    private readonly maxBytes: () => number,
  ) {}

  /** The first answer given to this id, if it was seen. */
  answerOf(commandId: string): Reply | undefined {
    const r = this.store.db.prepare('SELECT answer FROM fleet_commands WHERE command_id = ?').get(commandId) as { answer: string } | undefined;
    return r && (JSON.parse(r.answer) as Reply);
  }

  /** Read, check and apply one message of `cmd/<name>`. Never throws. */
  handle(name: string, payload: Buffer, nowMs = Date.now()): Handled {
    const effects: Effects = {};
    const once = (reply: Reply): Handled => ({ reply, repeated: false, effects: {} });
    if (payload.length > this.maxBytes()) return once(refuse(sniffCommandId(payload), EXIT.USAGE, `message of ${payload.length} bytes: larger than fleet.max_command_bytes (${this.maxBytes()}); not read`));
    let body: unknown;
    try {
      body = JSON.parse(payload.toString('utf8'));
    } catch (err) {
      return once(refuse(sniffCommandId(payload), EXIT.USAGE, `not JSON (${(err as Error).message})`));
    }
    if (typeof body !== 'object' || body === null || Array.isArray(body)) return once(refuse(null, EXIT.USAGE, 'expected a JSON object with a commandId'));
    const rawId = (body as { commandId?: unknown }).commandId;
    const id = commandIdSchema.safeParse(rawId);
    if (!id.success) return once(refuse(null, EXIT.USAGE, `commandId: ${id.error.issues[0]?.message ?? 'invalid'}, got ${JSON.stringify(rawId) ?? 'none'}`));
    const commandId = id.data;
    if (!Object.hasOwn(COMMANDS, name)) return once(refuse(commandId, EXIT.USAGE, `unknown command ${JSON.stringify(name)}: the agent runs only ${Object.keys(COMMANDS).join(', ')}`));
    const seen = this.answerOf(commandId);
    if (seen) {
      this.seenAgain(commandId, nowMs);
      return { reply: seen, repeated: true, effects: {} };
    }
    const parsed = check(COMMANDS[name as CommandName], body);
    if (!parsed.success) return once(refuse(commandId, EXIT.USAGE, `${name}: ${parsed.problems.map(problemLine).join('; ')}`));
    let reply: Reply;
    try {
      reply = this.store.durably(() => {
        let done: Reply;
        try {
          done = { commandId, ok: true, status: EXIT.OK, message: this.apply(name as CommandName, parsed.data as never, nowMs, effects) };
        } catch (err) {
          // Refused as the CLI refuses it: final, kept with the id. Anything else (the disk,
          // the buffer) is not: out of this commit, and the command may come again.
          if (!(err instanceof AgentError) || (err.exitCode !== EXIT.DATA && err.exitCode !== EXIT.USAGE)) throw err;
          // In dispatch's words: the rules' own name the CLI's options (refusal.ts).
          done = refuse(commandId, err.exitCode, dispatchWords(err) ?? err.message);
          effects.kick = effects.status = false;
        }
        this.store.db.prepare('INSERT INTO fleet_commands (command_id, name, answer, received_ms) VALUES (?, ?, ?, ?)').run(commandId, name, JSON.stringify(done), nowMs);
        return done;
      });
    } catch (err) {
      const status = err instanceof AgentError ? err.exitCode : EXIT.FAILURE;
      return once(refuse(commandId, status, `not applied: ${(err as Error).message}; send it again`));
    }
    return { reply, repeated: false, effects: reply.ok ? effects : {} };
  }

  /**
   * Forget the ids last received more than COMMAND_RETENTION_MS ago; counted from the newest
   * one's time if that is earlier than now: a clock set years ahead must not empty the table.
   * Only on a link whose commands could not come again (link.ts). Returns how many went.
   */
  prune(nowMs = Date.now()): number {
    const db = this.store.db;
    const newest = db.prepare('SELECT max(received_ms) FROM fleet_commands').pluck().get() as number | null;
    if (newest === null) return 0;
    const cutoff = Math.min(nowMs, newest) - COMMAND_RETENTION_MS;
    return db.prepare('DELETE FROM fleet_commands WHERE received_ms < ?').run(cutoff).changes;
  }

  /** A command handed over again: its id is kept from now (a retained one seen at each connect stays). */
  private seenAgain(commandId: string, nowMs: number): void {
    try {
      this.store.db.prepare('UPDATE fleet_commands SET received_ms = max(received_ms, ?) WHERE command_id = ?').run(nowMs, commandId);
    } catch {
      // A full disk: the answer goes anyway; the id is kept from its last successful write.
    }
  }

  private apply(name: CommandName, cmd: Record<string, unknown>, nowMs: number, effects: Effects): string {
    const config = this.config();
    switch (name) {
      case 'load-start': {
        const c = cmd as { loadNumber: string; resourceId: string; resourceType?: string; stops?: never; from?: string };
        const { row, warnings } = startLoadChecked(this.store, config, c, nowMs);
        effects.status = true;
        return withWarnings(describeStart(row), warnings);
      }
      case 'load-end': {
        const row = this.store.endLoad(String(cmd.loadNumber), nowMs);
        effects.status = true;
        return `load ${row.loadNumber} ended`;
      }
      case 'milestone': {
        const c = cmd as { loadNumber: string; eventCode: string; reasonCode?: string; stopsequenceNumber?: number; time?: string; eventCity?: string; eventState?: string };
        const { row, warnings } = recordMilestone(
          this.store,
          config,
          { loadNumber: c.loadNumber, code: c.eventCode, reason: c.reasonCode, stop: c.stopsequenceNumber, timeText: c.time, city: c.eventCity, state: c.eventState?.toUpperCase() },
          nowMs,
        );
        effects.kick = true;
        const time = (row.body.time as { dateTime?: string } | undefined)?.dateTime;
        // The warnings in dispatch's words (warnings.ts): the rules' own name the CLI's options.
        return withWarnings(`milestone ${row.id} (${row.code} for load ${row.loadNumber}${row.stop === null ? '' : `, stop ${row.stop}`}) committed at ${time}`, warnings);
      }
      case 'status':
        effects.status = true;
        return 'status published';
    }
  }
}
