/**
 * QoS 1 messages acknowledged (PUBACK) only once the commit that holds their readings is
 * done. Acknowledged on arrival, as MQTT.js does, a message was the broker's no more while
 * its reading waited in memory for the next commit (buffer.flush_interval_ms, 90 s): a power
 * cut then lost it. Unacknowledged, the broker keeps it in the persistent session and sends
 * it again at the next connection.
 *
 * The broker sends at most a window of unacknowledged messages (MQTT 5: the Receive Maximum
 * the agent gives it; 3.1.1: its own limit), so messages waiting for a commit ask for one:
 * when half a window waits (the broker keeps sending the other half meanwhile), or after
 * `delayMs` for the first of them, whatever comes first. A slow feed is then committed at most
 * once per delay, a fast one in batches of half a window.
 *
 * A message whose readings were all refused (not JSON, invalid, another topic) is
 * acknowledged too, in its turn: it will never be any better. One whose reading was dropped
 * from memory (buffer.max_pending, commits failing) is not, and once commits work again the
 * connection is opened again so that the broker sends it again. A PUBACK goes only on the connection its message came
 * on: after a reconnect the broker sends every unacknowledged message again, flagged DUP (a
 * timed reading already here is not taken twice, see mqtt.ts and buffer/seen.ts; an untimed
 * one may be committed twice: at least once, never lost).
 */
import type { MqttClient } from 'mqtt';
import { timer } from './common.js';
import { loadMqtt } from './mqtt-lib.js';
import type { Commits } from './types.js';

export interface AckOptions {
  /** The longest the first waiting message waits before a commit is asked for. */
  delayMs: number;
  /** A commit is asked for at once when this many messages wait. */
  batch: number;
}

/**
 * MQTT.js handles incoming messages one at a time: holding its handleMessage callback until
 * a commit would hold every later message too (one message per commit). So its own PUBACK is
 * skipped (handleMessage called back with an error) and this one is written by the client's
 * own packet writer, as its handlePublish does.
 */
type PacketWriter = { _sendPacket(packet: { cmd: 'puback'; messageId: number; reasonCode: number }): void };

/** Whether this MQTT.js can send a PUBACK of ours (its writer is internal: a new version may move it). */
export const CAN_ACK_LATER = typeof (loadMqtt().MqttClient.prototype as unknown as Partial<PacketWriter>)._sendPacket === 'function';

/** Handed to handleMessage's callback so that MQTT.js sends no PUBACK of its own; it reads it as nothing more. */
export const ACK_LATER = new Error('acknowledged once committed');

/** Write a PUBACK for a message of the client's current connection. */
export function sendPuback(client: MqttClient, messageId: number): void {
  (client as unknown as PacketWriter)._sendPacket({ cmd: 'puback', messageId, reasonCode: 0 });
}

export class AckQueue {
  /** The connection messages are taken on now; a PUBACK goes only on the one its message came on. */
  private connection = 0;
  /** Messages waiting for their commit, of every connection. */
  private waiting = 0;
  private timer: NodeJS.Timeout | undefined;
  private soon = false;
  private reconnectTimer: NodeJS.Timeout | undefined;
  /** Messages not acknowledged because a reading of theirs was dropped from memory. */
  dropped = 0;

  constructor(
    private readonly commits: Commits,
    private readonly opts: AckOptions,
    /** Acknowledge a message of the current connection. */
    private readonly ack: (messageId: number) => void,
    /** A reading was dropped: open the connection again, so the broker sends the message again. */
    private readonly reconnect: () => void,
  ) {}

  /** Where the next message's readings start: call before handing them over. */
  get position(): number {
    return this.commits.position;
  }

  /** A new connection, or the end of one: what waits is not acknowledged on another. */
  newConnection(): void {
    this.connection += 1;
    clearTimeout(this.reconnectTimer);
    this.reconnectTimer = undefined;
  }

  /** A QoS 1 message whose readings were handed over from `from` on: acknowledged once they are committed. */
  take(messageId: number, from: number): void {
    const connection = this.connection;
    this.waiting += 1;
    this.commits.whenCommitted(from, this.commits.position, (committed) => {
      this.waiting -= 1;
      if (this.waiting === 0) this.clearTimer();
      if (!committed) this.dropped += 1;
      if (connection !== this.connection) return;
      if (committed) this.ack(messageId);
      else this.reconnectSoon();
    });
    if (this.waiting === 0) return;
    if (this.waiting >= this.opts.batch) {
      // After the messages already read from the socket (MQTT.js hands them over in one go).
      if (!this.soon) {
        this.soon = true;
        setImmediate(() => {
          this.soon = false;
          if (this.waiting > 0) this.commitNow();
        });
      }
    } else {
      this.timer ??= timer(() => {
        this.timer = undefined;
        this.commitNow();
      }, this.opts.delayMs);
    }
  }

  /** Commit now if a message waits, acknowledging what that commits (before a stop's DISCONNECT). */
  commitNow(): void {
    this.clearTimer();
    if (this.waiting > 0) this.commits.commitNow();
  }

  stop(): void {
    this.clearTimer();
    this.newConnection();
  }

  /**
   * A message's reading was dropped: the connection is opened again once commits work (before,
   * the message sent again would only be dropped again, a reconnection at each backoff step).
   */
  private reconnectSoon(): void {
    if (this.reconnectTimer) return;
    const check = () => {
      this.reconnectTimer = this.commits.failing ? timer(check, this.opts.delayMs) : undefined;
      if (!this.reconnectTimer) this.reconnect();
    };
    this.reconnectTimer = timer(check, 0);
  }

  private clearTimer(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }
}
