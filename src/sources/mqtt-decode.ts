/**
 * Turning MQTT messages into readings: one JSON reading in the exec line format, or an array
 * of them, with `fields` renaming what a gateway calls them and `resource_from_topic` taking
 * the resource id from a level of the topic. Pure, so every rule is tested without a broker.
 */
import type { Reading } from '../reading.js';
import { preview } from './common.js';

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
