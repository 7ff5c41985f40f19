import { createHash } from 'node:crypto';
import { InputTooDeepError } from './errors.js';

/**
 * The deepest nesting of arrays, objects, maps and sets {@link canonicalize} reads (serde_json's
 * recursion limit is 128). Deeper input is refused with an {@link InputTooDeepError} (400) before
 * the recursion could overflow the stack.
 */
export const MAX_FINGERPRINT_DEPTH = 256;

/**
 * Canonical serialization used by the default fingerprint (F1). Two inputs that are equal as
 * values serialize identically, whatever the order of their object keys:
 *
 * - objects: keys sorted by code unit; properties whose value is `undefined`, a function or a
 *   symbol are left out (as `JSON.stringify` does), so `{a: 1, b: undefined}` equals `{a: 1}`;
 * - arrays: order kept (order is meaningful); `undefined` items become `null`, as in JSON;
 * - `Date`: `{"$date":"<ISO 8601>"}` (an invalid Date: `{"$date":null}`), so a Date and its ISO
 *   string differ;
 * - `bigint`: `{"$bigint":"<decimal>"}`, so `1n` and `1` differ;
 * - non-finite numbers: `{"$number":"NaN" | "Infinity" | "-Infinity"}`; `-0` is `0`;
 * - `Map`: `{"$map":[[k, v], ...]}` sorted by the canonical form of `k`; `Set`: `{"$set":[...]}`
 *   sorted likewise;
 * - `Uint8Array`/`Buffer`: `{"$bytes":"<base64>"}`;
 * - objects with `toJSON` (other than the above) are serialized through it;
 * - a cycle throws a `TypeError`;
 * - nesting deeper than {@link MAX_FINGERPRINT_DEPTH} throws an {@link InputTooDeepError} (400).
 */
export function canonicalize(value: unknown): string {
  return serialize(value, new Set(), 0);
}

function serialize(value: unknown, seen: Set<object>, depth: number): string {
  switch (typeof value) {
    case 'string':
      return JSON.stringify(value);
    case 'boolean':
      return value ? 'true' : 'false';
    case 'number':
      if (Number.isFinite(value)) return JSON.stringify(value === 0 ? 0 : value);
      return `{"$number":${JSON.stringify(String(value))}}`;
    case 'bigint':
      return `{"$bigint":${JSON.stringify(value.toString())}}`;
    case 'undefined':
    case 'function':
    case 'symbol':
      return 'null';
    case 'object':
      break;
  }
  if (value === null) return 'null';
  const object = value as object;
  if (object instanceof Date) {
    return `{"$date":${Number.isNaN(object.getTime()) ? 'null' : JSON.stringify(object.toISOString())}}`;
  }
  if (object instanceof Uint8Array) {
    return `{"$bytes":${JSON.stringify(Buffer.from(object.buffer, object.byteOffset, object.byteLength).toString('base64'))}}`;
  }
  if (seen.has(object)) throw new TypeError('[idem] cannot fingerprint a value with a cycle');
  if (depth >= MAX_FINGERPRINT_DEPTH) throw new InputTooDeepError(MAX_FINGERPRINT_DEPTH);
  const inner = depth + 1;
  seen.add(object);
  try {
    if (Array.isArray(object)) {
      return `[${object.map((item) => serialize(item, seen, inner)).join(',')}]`;
    }
    if (object instanceof Map) {
      const entries = [...object].map(([k, v]) => [serialize(k, seen, inner), serialize(v, seen, inner)] as const);
      entries.sort(([a], [b]) => compare(a, b));
      return `{"$map":[${entries.map(([k, v]) => `[${k},${v}]`).join(',')}]}`;
    }
    if (object instanceof Set) {
      const items = [...object].map((item) => serialize(item, seen, inner)).sort(compare);
      return `{"$set":[${items.join(',')}]}`;
    }
    const toJSON = (object as { toJSON?: unknown }).toJSON;
    if (typeof toJSON === 'function') return serialize(toJSON.call(object), seen, inner);
    const keys = Object.keys(object).sort(compare);
    const parts: string[] = [];
    for (const key of keys) {
      const item = (object as Record<string, unknown>)[key];
      if (item === undefined || typeof item === 'function' || typeof item === 'symbol') continue;
      parts.push(`${JSON.stringify(key)}:${serialize(item, seen, inner)}`);
    }
    return `{${parts.join(',')}}`;
  } finally {
    seen.delete(object);
  }
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** SHA-256 (hex) of a string. */
function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

/**
 * The format of {@link defaultFingerprint}: the canonical serialization of {@link canonicalize}
 * and SHA-256. Stored fingerprints carry it as a prefix (`f1:<hex>`), so a record says how its
 * fingerprint was made. A stored fingerprint must never change between releases — a retry in
 * flight during a deploy would get 422 — so a release that changes the serialization must give it
 * a new version and keep computing this one for records that carry it. The golden vectors in
 * `packages/core/test/fingerprint.test.ts` hold version 1 fixed.
 */
export const FINGERPRINT_FORMAT_VERSION = 1;

const FINGERPRINT_PREFIX = `f${FINGERPRINT_FORMAT_VERSION}:`;

/**
 * The default fingerprint (F1): `f1:` and the SHA-256 (hex) of {@link canonicalize} of the
 * validated input.
 */
export function defaultFingerprint(input: unknown): string {
  return `${FINGERPRINT_PREFIX}${sha256(canonicalize(input))}`;
}

/**
 * The format version a stored fingerprint was made with: 1 for {@link defaultFingerprint}'s
 * `f1:<64 hex>` (the `'default'` and `{ fields }` options), undefined for one of your own (a
 * fingerprint function's value is stored as it returns it).
 */
export function fingerprintFormatVersion(fingerprint: string): number | undefined {
  const match = /^f([1-9][0-9]*):[0-9a-f]{64}$/.exec(fingerprint);
  return match ? Number(match[1]) : undefined;
}

/**
 * How an endpoint fingerprints its input (F2):
 * - `'default'` (or omitted): {@link defaultFingerprint} of the whole validated input
 *   (`f1:<SHA-256 hex>`, see {@link FINGERPRINT_FORMAT_VERSION});
 * - `{ fields: ['amount', 'customer.id'] }`: the default fingerprint over the selected
 *   (dotted) paths only;
 * - a function: your own fingerprint (return any string, stored as it is; `null` means none).
 *   Keep what it returns stable across your releases, as idem keeps its own;
 * - `false`: no fingerprint. The server then cannot tell a retry from a reuse and never
 *   answers 422 (F2).
 */
export type FingerprintOption =
  | 'default'
  | false
  | { fields: readonly string[] }
  | ((input: unknown) => string | null | Promise<string | null>);

/**
 * Computes the fingerprint of `input` under an endpoint's option. `exclude` names top-level
 * input fields left out (the key's own input field, K4/F1).
 */
export async function computeFingerprint(
  input: unknown,
  option: FingerprintOption = 'default',
  exclude: readonly string[] = [],
): Promise<string | null> {
  if (option === false) return null;
  const subject = exclude.length > 0 ? omit(input, exclude) : input;
  if (option === 'default') return defaultFingerprint(subject);
  if (typeof option === 'function') return option(subject);
  return defaultFingerprint(pick(subject, option.fields));
}

function omit(input: unknown, fields: readonly string[]): unknown {
  if (input === null || typeof input !== 'object' || Array.isArray(input)) return input;
  const copy: Record<string, unknown> = { ...(input as Record<string, unknown>) };
  for (const field of fields) delete copy[field];
  return copy;
}

function pick(input: unknown, paths: readonly string[]): Record<string, unknown> {
  const picked: Record<string, unknown> = {};
  for (const path of paths) {
    let cursor: unknown = input;
    for (const segment of path.split('.')) {
      cursor = cursor !== null && typeof cursor === 'object' ? (cursor as Record<string, unknown>)[segment] : undefined;
    }
    picked[path] = cursor;
  }
  return picked;
}
