/**
 * E2/E4: the response is the outcome, and its body is bytes. Whatever a handler answers — any
 * bytes (invalid UTF-8, a byte-order mark, NUL), any status that has a body, any media type — the
 * first client and every replay get exactly those bytes, through the real stores (SQLite and
 * PostgreSQL keep text: the body is stored as UTF-8 text when it is UTF-8, base64 otherwise).
 * The oracle is the handler's own bytes. And a body streamed past `maxStoredBytes` reaches its
 * client whole, while every replay gets the documented 500 that says the request was executed.
 */
import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatScope, type IdempotencyStore } from '@idem/core';
import { idempotent } from '@idem/fetch';
import { STORE_TARGETS, post, read } from './support.ts';

const encoder = new TextEncoder();

/** Bodies as handlers send them: raw bytes, and UTF-8 texts with the characters text stores get wrong. */
const bodyBytes = fc.oneof(
  fc.uint8Array({ maxLength: 300 }),
  fc.string({ unit: 'grapheme', maxLength: 100 }).map((text) => encoder.encode(text)),
  fc.string({ maxLength: 50 }).map((text) => encoder.encode(`\uFEFF${text}\u0000${text}`)),
  fc.constant(new Uint8Array([0xef, 0xbb, 0xbf])),
  fc.constant(new Uint8Array([0xc3])),
);
const statusWithBody = fc.integer({ min: 200, max: 599 }).filter((status) => ![204, 205, 304].includes(status));
const mediaType = fc.constantFrom(
  'application/json',
  'text/plain; charset=utf-8',
  'application/octet-stream',
  'image/png',
  'text/csv; charset=iso-8859-1',
  undefined,
);

describe.each(STORE_TARGETS)('E2 on $name: response bodies are bytes', (target) => {
  let store: IdempotencyStore;
  let close: () => Promise<void>;
  beforeAll(async () => ({ store, close } = await target.open()));
  afterAll(() => close());

  it('E2: any body, status and media type is answered and replayed byte for byte (fast-check, 60 runs)', async () => {
    await fc.assert(
      fc.asyncProperty(bodyBytes, statusWithBody, mediaType, async (bytes, status, type) => {
        let calls = 0;
        const route = idempotent(
          async () => {
            calls++;
            return new Response(bytes.slice(), {
              status,
              ...(type === undefined ? {} : { headers: { 'content-type': type } }),
            });
          },
          { store, principal: () => 'bytes' },
        );
        const key = `bytes-${randomUUID()}`;
        const first = await read(await route(post('http://localhost/files', { key })));
        const replay = await read(await route(post('http://localhost/files', { key })));
        expect(first.bytes.equals(Buffer.from(bytes))).toBe(true);
        expect(replay.bytes.equals(Buffer.from(bytes))).toBe(true);
        expect([replay.status, replay.replayed]).toEqual([status, true]);
        expect(replay.headers.get('content-type')).toBe(first.headers.get('content-type'));
        expect(calls).toBe(1);
      }),
      { numRuns: 60, seed: 27, interruptAfterTimeLimit: 60_000 },
    );
  }, 120_000);

  it('E4: a body streamed past maxStoredBytes reaches its client whole; every replay is a 500 problem that says it was executed, and nothing of the body is stored', async () => {
    const chunk = new Uint8Array(4096).fill(0x61);
    let calls = 0;
    const route = idempotent(
      async () => {
        calls++;
        let sent = 0;
        const stream = new ReadableStream<Uint8Array>({
          pull(controller) {
            if (sent++ < 100) controller.enqueue(chunk);
            else controller.close();
          },
        });
        return new Response(stream, { status: 201, headers: { 'content-type': 'text/csv' } });
      },
      { store, principal: () => 'big', maxStoredBytes: 10_000 },
    );
    const key = `big-${randomUUID()}`;
    const first = await read(await route(post('http://localhost/export', { key })));
    expect([first.status, first.bytes.length, first.replayed]).toEqual([201, 409_600, false]);
    expect(first.bytes.every((byte) => byte === 0x61)).toBe(true);

    const replay = await read(await route(post('http://localhost/export', { key })));
    expect([replay.status, replay.replayed, replay.headers.get('content-type')]).toEqual([
      500,
      true,
      'application/problem+json',
    ]);
    expect(replay.json).toMatchObject({ type: 'about:blank', status: 500 });
    expect(replay.json.detail).toMatch(
      /was executed \(outcome: success, status 201\), but its result \(at least \d+ bytes\) is larger than the 10000 bytes idem stores.*Do not retry/,
    );
    expect(calls).toBe(1);
    const record = await store.get(formatScope('POST /export', 'big'), key);
    expect(record).toMatchObject({ state: 'completed', outcome: { kind: 'error', status: 500 } });
    expect(record!.outcome!.body).not.toContain('aaaa');
  });

  it('E4: a body within maxStoredBytes whose stored form is larger (base64) is answered whole and replays as the same 500', async () => {
    const bytes = new Uint8Array(900).map((_, i) => (i * 131) % 256);
    const route = idempotent(async () => new Response(bytes.slice()), {
      store,
      principal: () => 'big',
      maxStoredBytes: 1000,
    });
    const key = `b64-${randomUUID()}`;
    const first = await read(await route(post('http://localhost/blob', { key })));
    expect(first.bytes.equals(Buffer.from(bytes))).toBe(true);
    const replay = await read(await route(post('http://localhost/blob', { key })));
    expect([replay.status, replay.replayed]).toEqual([500, true]);
    expect(replay.json.detail).toMatch(/was executed \(outcome: success, status 200\).*larger than the 1000 bytes/);
  });
});
