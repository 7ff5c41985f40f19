/**
 * F1/F3 for plain HTTP: two requests with one key are the same request exactly when an
 * independent reading says so — the same media type, and then, for a JSON media type, bodies that
 * `JSON.parse` reads as equal values (key order, white space and number spelling aside), or else
 * the same bytes (a JSON body that does not parse included). A second request that is the same is
 * a replay; any other is a 422 (F3). fast-check generates the pairs, among them pairs built to
 * collide: a JSON body spelling out the canonical form of another body's bytes.
 */
import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { MemoryStore } from '@idem/core';
import { idempotent } from '@idem/fetch';

interface Sent {
  contentType: string | undefined;
  bytes: Uint8Array;
}

const encoder = new TextEncoder();
const JSON_TYPES = new Set(['application/json', 'application/merge-patch+json']);

/** The oracle: written from the rule, sharing nothing with the adapter's code. */
function sameRequest(a: Sent, b: Sent): boolean {
  const type = (sent: Sent) =>
    sent.contentType === undefined ? null : sent.contentType.split(';')[0]!.trim().toLowerCase();
  if (type(a) !== type(b)) return false;
  if (JSON_TYPES.has(type(a) ?? '')) {
    const [x, y] = [parse(a.bytes), parse(b.bytes)];
    if (x.ok && y.ok) return equalValues(x.value, y.value);
    if (x.ok !== y.ok) return false;
  }
  return Buffer.from(a.bytes).equals(Buffer.from(b.bytes));
}

function parse(bytes: Uint8Array): { ok: true; value: unknown } | { ok: false } {
  try {
    return { ok: true, value: JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes)) };
  } catch {
    return { ok: false };
  }
}

function equalValues(x: unknown, y: unknown): boolean {
  if (Array.isArray(x) || Array.isArray(y))
    return (
      Array.isArray(x) && Array.isArray(y) && x.length === y.length && x.every((item, i) => equalValues(item, y[i]))
    );
  if (x !== null && y !== null && typeof x === 'object' && typeof y === 'object') {
    const keys = Object.keys(x);
    return (
      keys.length === Object.keys(y).length &&
      keys.every(
        (key) =>
          Object.hasOwn(y, key) &&
          equalValues((x as Record<string, unknown>)[key], (y as Record<string, unknown>)[key]),
      )
    );
  }
  return x === y;
}

/** A JSON value written out with its object keys in another order and other white space. */
function respell(value: unknown, order: number, space: number): string {
  const reorder = (item: unknown): unknown => {
    if (Array.isArray(item)) return item.map(reorder);
    if (item === null || typeof item !== 'object') return item;
    const entries = Object.entries(item);
    if (order % 2 === 1) entries.reverse();
    return Object.fromEntries(entries.map(([key, inner]) => [key, reorder(inner)]));
  };
  return JSON.stringify(reorder(value), null, space);
}

const contentTypes = fc.constantFrom(
  'application/json',
  'application/json; charset=utf-8',
  'application/merge-patch+json',
  'text/plain',
  'application/octet-stream',
  undefined,
);
const jsonBody = fc.jsonValue({ maxDepth: 3 }).map((value) => encoder.encode(JSON.stringify(value)));
const rawBody = fc.oneof(
  fc.uint8Array({ maxLength: 40 }),
  fc.string({ maxLength: 20 }).map((s) => encoder.encode(s)),
);
const sent = fc.record({ contentType: contentTypes, bytes: fc.oneof(jsonBody, rawBody) });

/** The second request of a pair: the same value respelled, another content type, or anything. */
const pairs = fc.oneof(
  fc.tuple(sent, sent),
  fc
    .tuple(fc.jsonValue({ maxDepth: 3 }), contentTypes, fc.nat(3), fc.nat(3))
    .map(([value, contentType, order, space]) => [
      { contentType, bytes: encoder.encode(JSON.stringify(value)) },
      { contentType, bytes: encoder.encode(respell(value, order, space)) },
    ]),
  fc.tuple(sent, contentTypes).map(([first, contentType]) => [first, { contentType, bytes: first.bytes }]),
  // Built to collide: bytes that are not JSON, and a JSON body that spells out their canonical form.
  fc.tuple(fc.uint8Array({ minLength: 1, maxLength: 20 }), contentTypes).map(([bytes, contentType]) => {
    const notJson = new Uint8Array([0x7b, ...bytes]);
    const spelled = encoder.encode(JSON.stringify({ $bytes: Buffer.from(notJson).toString('base64') }));
    return [
      { contentType, bytes: notJson },
      { contentType, bytes: spelled },
    ];
  }),
) as fc.Arbitrary<[Sent, Sent]>;

describe('F1/F3: which plain HTTP requests are the same request', () => {
  it('F3: a second request with the key replays exactly when the oracle says it is the same request, and is a 422 otherwise (fast-check, 300 pairs)', async () => {
    let calls = 0;
    const route = idempotent(
      async () => {
        calls++;
        return new Response(`call ${calls}`);
      },
      { store: new MemoryStore(), principal: () => 'p', key: { field: false } },
    );
    const send = (key: string, { contentType, bytes }: Sent) =>
      route(
        new Request('http://localhost/orders', {
          method: 'POST',
          headers: { 'idempotency-key': key, ...(contentType === undefined ? {} : { 'content-type': contentType }) },
          body: bytes.slice(),
        }),
      );
    await fc.assert(
      fc.asyncProperty(pairs, async ([a, b]) => {
        const key = `fp-${randomUUID()}`;
        expect((await send(key, a)).status).toBe(200);
        const second = await send(key, b);
        if (sameRequest(a, b))
          expect([second.status, second.headers.get('idempotent-replayed')]).toEqual([200, 'true']);
        else expect(second.status).toBe(422);
      }),
      { numRuns: 300, seed: 2027, interruptAfterTimeLimit: 60_000 },
    );
  });
});
