/**
 * The options of `idempotent()` and the Hono middleware: refused when they encode a policy that
 * cannot hold (a clear `[idem]` TypeError when the handler is made, never at the first request),
 * and atomic mode on PostgreSQL: the handler's write through `idempotencyClaim(request).tx`
 * commits with the stored response, or not at all.
 */
import { randomUUID } from 'node:crypto';
import { Hono } from 'hono';
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryStore } from '@idem/core';
import { createDrizzleStore, migrate, type DrizzleStore } from '@idem/drizzle';
import { idempotencyClaim, idempotent, sharedPrincipal, type IdempotentOptions } from '@idem/fetch';
import { idempotency } from '@idem/fetch/hono';
import { CREATE_PAYMENTS, countPgPayments, payOnPostgres } from '../../drizzle/test/payments.ts';
import { openPostgresTarget, type PostgresTarget } from '../../drizzle/test/pg-target.ts';
import { openSqliteTarget } from '../../drizzle/test/sqlite-target.ts';
import { post, read } from './support.ts';

const handler = async () => new Response('ok');
const base: IdempotentOptions = { store: new MemoryStore(), principal: sharedPrincipal };

describe('options that cannot hold are refused when the handler is made', () => {
  it('S1: without a principal function', () => {
    const options = { store: new MemoryStore() } as unknown as IdempotentOptions;
    expect(() => idempotent(handler, options)).toThrow(
      /\[idem\] idempotent\(\) needs a `principal\(context\)` function/,
    );
    expect(() => idempotency(options as never)).toThrow(/\[idem\] idempotency\(\) needs a `principal/);
  });

  it.each(['GET', 'head', 'OPTIONS', 'TRACE'])(
    'a safe method in `methods` (%s): safe methods are never keyed',
    (method) => {
      expect(() => idempotent(handler, { ...base, methods: ['POST', method] })).toThrow(
        /\[idem\] idempotent\(\): `methods` cannot include [A-Z]+: safe methods are never keyed/,
      );
    },
  );

  it.each(['Set-Cookie', 'set-cookie2', 'Content-Length', 'Transfer-Encoding', 'Connection', 'Idempotent-Replayed'])(
    'E2: a header that is never stored in `replayHeaders` (%s)',
    (name) => {
      expect(() => idempotent(handler, { ...base, replayHeaders: ['x-request-id', name] })).toThrow(
        new RegExp(`\\[idem\\] idempotent\\(\\): \`replayHeaders\` cannot include "${name}"`),
      );
    },
  );

  it('atomic mode on better-sqlite3 (its transactions cannot span the handler’s awaits)', async () => {
    const target = await openSqliteTarget();
    try {
      await migrate(target.db);
      expect(() =>
        idempotent(handler, { store: createDrizzleStore(target.db), principal: sharedPrincipal, atomic: true }),
      ).toThrow(/\[idem\]/);
    } finally {
      await target.close();
    }
  });
});

describe('what is stored of a response', () => {
  it('E2: a header the response names in Connection is hop-by-hop, not stored, even when listed', async () => {
    const route = idempotent(
      async () => new Response('ok', { headers: { connection: 'x-trace', 'x-trace': 'abc', 'x-cost': '3' } }),
      { ...base, store: new MemoryStore(), replayHeaders: ['x-trace', 'x-cost'] },
    );
    await route(post('http://localhost/a', { key: 'k' }));
    const replay = await route(post('http://localhost/a', { key: 'k' }));
    expect([replay.headers.get('x-cost'), replay.headers.get('x-trace'), replay.headers.get('connection')]).toEqual([
      '3',
      null,
      null,
    ]);
  });

  it('Hono: a body a middleware before it already read (a validator) is still fingerprinted, through Hono’s body cache', async () => {
    const app = new Hono();
    let calls = 0;
    app.post(
      '/orders',
      async (c, next) => {
        await c.req.json();
        await next();
      },
      idempotency({ store: new MemoryStore(), principal: sharedPrincipal }),
      async (c) => c.json({ call: ++calls, body: await c.req.json() }),
    );
    const send = (body: unknown) =>
      app.request('/orders', {
        method: 'POST',
        headers: { 'idempotency-key': 'k', 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    expect((await read(await send({ a: 1 }))).json).toEqual({ call: 1, body: { a: 1 } });
    expect((await read(await send({ a: 1 }))).replayed).toBe(true);
    expect((await send({ a: 2 })).status).toBe(422);
  });
});

describe('atomic mode on PostgreSQL: the handler writes through idempotencyClaim(request).tx', () => {
  let target: PostgresTarget;
  let store: DrizzleStore;
  beforeAll(async () => {
    target = await openPostgresTarget({ schemaPrefix: 'idem_fetch_atomic' });
    await migrate(target.db);
    await target.db.execute(sql.raw(CREATE_PAYMENTS));
    store = createDrizzleStore(target.db);
  });
  afterAll(() => target?.close());

  it('E1/E2: the write commits with the stored response; a replay writes nothing; a handler error rolls its write back and is stored (E4)', async () => {
    let calls = 0;
    const route = idempotent(
      async (request: Request) => {
        calls++;
        const { id, decline } = await request.json();
        await payOnPostgres(idempotencyClaim(request)?.tx, id);
        if (decline) throw new Error('card declined');
        return Response.json({ id }, { status: 201 });
      },
      { store, principal: sharedPrincipal, atomic: true },
    );
    const before = await countPgPayments(target.db);
    const key = `atomic-${randomUUID()}`;
    const first = await read(await route(post('http://localhost/pay', { key, body: { id: key } })));
    const replay = await read(await route(post('http://localhost/pay', { key, body: { id: key } })));
    expect([first.status, replay.status, replay.replayed, replay.text]).toEqual([201, 201, true, first.text]);
    expect(await countPgPayments(target.db)).toBe(before + 1);

    const declined = `atomic-declined-${randomUUID()}`;
    const send = () => route(post('http://localhost/pay', { key: declined, body: { id: declined, decline: true } }));
    await expect(send()).rejects.toThrow('card declined');
    await expect(send()).rejects.toThrow('card declined');
    expect(await countPgPayments(target.db)).toBe(before + 1);
    expect(calls).toBe(2);
  });
});
