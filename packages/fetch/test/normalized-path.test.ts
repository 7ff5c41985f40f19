/**
 * S1 with a path that is percent-encoded: `idempotent()` scopes and fingerprints by the path as
 * the router that matches it reads it (`normalizedPath`), so `/orders/1` and `/orders/%31` are one
 * record and the same key runs once; the Hono middleware scopes by the matched route template.
 */
import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { Hono } from 'hono';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { IdempotencyStore } from '@idem/core';
import { idempotent } from '@idem/fetch';
import { idempotency } from '@idem/fetch/hono';
import { normalizedPath } from '../src/normalized-path.ts';
import { STORE_TARGETS } from './support.ts';

const ORIGIN = 'http://localhost:3000';

describe('normalizedPath', () => {
  it('S1: decodes the percent-encoding of unreserved characters and keeps every other, upper-cased', () => {
    expect(normalizedPath('/orders/%31')).toBe('/orders/1');
    expect(normalizedPath('/a%7Eb%2db%5F%2E')).toBe('/a~b-b_.');
    expect(normalizedPath('/a%2fb%3F%20')).toBe('/a%2Fb%3F%20');
  });

  it('S1: any path and its unreserved characters percent-encoded normalise alike (generative)', () => {
    const unreserved = fc.constantFrom(...'abcXYZ0189-._~'.split(''));
    const segment = fc.array(fc.tuple(unreserved, fc.boolean()), { minLength: 1, maxLength: 12 });
    fc.assert(
      fc.property(fc.array(segment, { minLength: 1, maxLength: 4 }), (segments) => {
        const plain = `/${segments.map((s) => s.map(([c]) => c).join('')).join('/')}`;
        const encoded = `/${segments
          .map((s) =>
            s.map(([c, encode]) => (encode ? `%${c.charCodeAt(0).toString(16).padStart(2, '0')}` : c)).join(''),
          )
          .join('/')}`;
        expect(normalizedPath(encoded)).toBe(normalizedPath(plain));
      }),
    );
  });
});

describe.each(STORE_TARGETS)('one route, two spellings of its path, on $name', (target) => {
  let store: IdempotencyStore;
  let close: () => Promise<void>;
  beforeAll(async () => ({ store, close } = await target.open()));
  afterAll(() => close());

  const send = (handler: (request: Request) => Promise<Response>, path: string, key: string) =>
    handler(
      new Request(`${ORIGIN}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': key },
        body: JSON.stringify({ amount: 10 }),
      }),
    );

  it('S1/E2: idempotent() runs `/orders/1` and `/orders/%31` with one key once, and replays the second', async () => {
    let runs = 0;
    const handler = idempotent(async () => Response.json({ run: ++runs }, { status: 201 }), {
      store,
      principal: () => 'alice',
    });
    const key = `path-${randomUUID()}`;
    const first = await send(handler, '/orders/1', key);
    const second = await send(handler, '/orders/%31', key);
    expect(first.status).toBe(201);
    expect(second.status).toBe(201);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(runs).toBe(1);
  });

  it('S1/F3: under Hono the same key on `/orders/1` and then `/orders/2` is one record asked two things: 422', async () => {
    let runs = 0;
    const app = new Hono();
    app.post('/orders/:id', idempotency({ store, principal: () => 'alice' }), (c) => c.json({ run: ++runs }, 201));
    const key = `hono-${randomUUID()}`;
    const handler = async (request: Request) => app.fetch(request);
    expect((await send(handler, '/orders/1', key)).status).toBe(201);
    expect((await send(handler, '/orders/%31', key)).headers.get('idempotent-replayed')).toBe('true');
    expect((await send(handler, '/orders/2', key)).status).toBe(422);
    expect(runs).toBe(1);
  });
});
