/**
 * What does not depend on a working store: fail-closed on real stores that cannot reach their
 * database (a closed SQLite connection, a closed PostgreSQL port), pass-through of queries and
 * subscriptions, configuration errors, and composing the error formatter.
 */
import { request } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { initTRPC } from '@trpc/server';
import { z } from 'zod';
import { MemoryStore, deriveKey, formatScope } from '@idem/core';
import { unreachableStores } from '../../drizzle/test/unreachable-stores.ts';
import {
  idempotency,
  idempotencyClaim,
  idempotencyErrorData,
  idempotencyErrorFormatter,
  sharedPrincipal,
  type IdempotencyContext,
} from '../src/index.ts';
import { mutate, newKey, startStandalone, type RunningServer } from './http.ts';

type Context = IdempotencyContext & { user: string };

const servers: RunningServer[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((server) => server.close()));
});

async function serve(...args: Parameters<typeof startStandalone>): Promise<string> {
  const server = await startStandalone(...args);
  servers.push(server);
  return server.url;
}

describe('@idem/trpc middleware', () => {
  it.each(unreachableStores)(
    'E5: a store that cannot reach its database ($name) answers 503 SERVICE_UNAVAILABLE with Retry-After, and the resolver does not run',
    async ({ open }) => {
      const unreachable = await open();
      try {
        let runs = 0;
        const t = initTRPC.context<Context>().create({ errorFormatter: idempotencyErrorFormatter });
        const router = t.router({
          pay: t.procedure
            .input(z.object({ amount: z.number() }))
            .use(idempotency({ store: unreachable.store, principal: (ctx: Context) => ctx.user }))
            .mutation(() => ++runs),
        });
        const response = await mutate(await serve(router), 'pay', { amount: 1 }, { 'idempotency-key': newKey() });
        expect(response.status).toBe(503);
        expect(response.headers.get('retry-after')).toBe('2');
        expect(response.body.error.data).toMatchObject({
          code: 'SERVICE_UNAVAILABLE',
          httpStatus: 503,
          idempotency: { code: 'idempotency_store_unavailable', status: 503, retryAfter: 2 },
        });
        expect(runs).toBe(0);
      } finally {
        await unreachable.close();
      }
    },
  );

  it('E6: the resolver reads its claim from ctx and derives a downstream key that is stable for the key and differs per key', async () => {
    const t = initTRPC.context<Context>().create();
    const derived: Array<string | undefined> = [];
    const router = t.router({
      pay: t.procedure
        .input(z.object({ amount: z.number() }))
        .use(idempotency({ store: new MemoryStore(), principal: (ctx: Context) => ctx.user }))
        .mutation(({ ctx }) => {
          const claim = idempotencyClaim(ctx);
          derived.push(claim?.deriveKey('channel'));
          return claim?.generation;
        }),
      plain: t.procedure.mutation(({ ctx }) => idempotencyClaim(ctx) === undefined),
    });
    const url = await serve(router);
    const first = await mutate(url, 'pay', { amount: 1 }, { 'idempotency-key': 'k-1' });
    await mutate(url, 'pay', { amount: 1 }, { 'idempotency-key': 'k-2' });
    expect(first.body.result.data).toBe(1);
    expect(derived).toHaveLength(2);
    expect(derived[0]).toBe(deriveKey({ scope: formatScope('pay', 'alice'), key: 'k-1', generation: 1 }, 'channel'));
    expect(derived[1]).not.toBe(derived[0]);
    expect((await mutate(url, 'plain', undefined, {})).body.result.data).toBe(true);
  });

  it('queries and subscriptions pass through untouched, even without idempotencyContext in the context', async () => {
    const t = initTRPC.context<{ user: string }>().create();
    const idempotent = idempotency({ store: new MemoryStore(), principal: (ctx: { user: string }) => ctx.user });
    let queries = 0;
    const router = t.router({
      count: t.procedure.use(idempotent).query(() => ++queries),
      ticks: t.procedure.use(idempotent).subscription(async function* () {
        yield 1;
        yield 2;
      }),
    });
    const caller = t.createCallerFactory(router)({ user: 'alice' });
    expect([await caller.count(), await caller.count()]).toEqual([1, 2]);
    const ticks: number[] = [];
    for await (const tick of await caller.ticks()) ticks.push(tick);
    expect(ticks).toEqual([1, 2]);
  });

  it('an input-field key works without HTTP (server-side caller), with no response headers to set', async () => {
    const t = initTRPC.context<{ user: string }>().create();
    let runs = 0;
    const router = t.router({
      pay: t.procedure
        .input(z.object({ amount: z.number(), idempotencyKey: z.string() }))
        .use(
          idempotency({
            store: new MemoryStore(),
            principal: (ctx: { user: string }) => ctx.user,
            key: { header: false },
          }),
        )
        .mutation(({ input }) => ({ run: ++runs, amount: input.amount })),
    });
    const caller = t.createCallerFactory(router)({ user: 'alice' });
    const idempotencyKey = newKey();
    const first = await caller.pay({ amount: 1, idempotencyKey });
    expect(await caller.pay({ amount: 1, idempotencyKey })).toEqual(first);
    expect(runs).toBe(1);
  });

  it('a header key without idempotencyContext in the context fails with an [idem] configuration error, and the resolver does not run', async () => {
    let runs = 0;
    const t = initTRPC.context<{ user: string }>().create();
    const router = t.router({
      pay: t.procedure
        .use(idempotency({ store: new MemoryStore(), principal: sharedPrincipal }))
        .mutation(() => ++runs),
    });
    const response = await mutate(await serve(router, () => ({ user: 'alice' })), 'pay', undefined, {
      'idempotency-key': newKey(),
    });
    expect(response.status).toBe(500);
    expect(response.body.error.message).toMatch(/^\[idem\] .*idempotencyContext/);
    expect(runs).toBe(0);
  });

  it('F3: placed before .input(), the raw input is fingerprinted, so another payload still gets 422', async () => {
    let runs = 0;
    const t = initTRPC.context<Context>().create({ errorFormatter: idempotencyErrorFormatter });
    const router = t.router({
      pay: t.procedure
        .use(idempotency({ store: new MemoryStore(), principal: (ctx: Context) => ctx.user }))
        .input(z.object({ amount: z.number() }))
        .mutation(({ input }) => ({ run: ++runs, amount: input.amount })),
    });
    const url = await serve(router);
    const headers = { 'idempotency-key': newKey() };
    expect((await mutate(url, 'pay', { amount: 1 }, headers)).status).toBe(200);
    const changed = await mutate(url, 'pay', { amount: 2 }, headers);
    expect(changed.status).toBe(422);
    expect(runs).toBe(1);
  });

  it('K1: two Idempotency-Key header fields get 400 idempotency_key_invalid', async () => {
    const t = initTRPC.context<Context>().create({ errorFormatter: idempotencyErrorFormatter });
    let runs = 0;
    const router = t.router({
      pay: t.procedure
        .use(idempotency({ store: new MemoryStore(), principal: sharedPrincipal }))
        .mutation(() => ++runs),
    });
    const { port } = new URL(await serve(router));
    const response = await new Promise<{ status: number; body: any }>((resolve, reject) => {
      const req = request(
        {
          host: '127.0.0.1',
          port,
          path: '/pay',
          method: 'POST',
          headers: { 'content-type': 'application/json', 'idempotency-key': [newKey(), newKey()] },
        },
        (res) => {
          let text = '';
          res.on('data', (chunk: Buffer) => (text += chunk.toString()));
          res.on('end', () => resolve({ status: res.statusCode!, body: JSON.parse(text) }));
        },
      );
      req.on('error', reject);
      req.end();
    });
    expect(response.status).toBe(400);
    expect(response.body.error.data.idempotency).toMatchObject({
      code: 'idempotency_key_invalid',
      detail: expect.stringContaining('several Idempotency-Key header lines were sent'),
    });
    expect(runs).toBe(0);
  });

  it('S1: principal is required; sharedPrincipal is the explicit opt-out', () => {
    expect(() => idempotency({ store: new MemoryStore() } as never)).toThrow(
      /^\[idem\] idempotency\(\) needs a `principal\(context\)` function \(S1\)/,
    );
    expect(() => idempotency({ store: new MemoryStore(), principal: sharedPrincipal })).not.toThrow();
  });

  it('R1: retention reaches the engine as it is given, 24 hours by default', () => {
    const store = new MemoryStore();
    expect(idempotency({ store, principal: sharedPrincipal, retention: '3h' }).engine.policy.retentionMs).toBe(
      10_800_000,
    );
    expect(idempotency({ store, principal: sharedPrincipal }).engine.policy.retentionMs).toBe(86_400_000);
  });

  it('X2: idempotencyErrorData composes with your own errorFormatter, and documentationUrl is the problem type', async () => {
    const t = initTRPC.context<Context>().create({
      errorFormatter: ({ shape, error }) => ({
        ...shape,
        data: { ...shape.data, idempotency: idempotencyErrorData(error), mine: true },
      }),
    });
    const router = t.router({
      pay: t.procedure
        .use(
          idempotency({
            store: new MemoryStore(),
            principal: (ctx: Context) => ctx.user,
            documentationUrl: 'https://api.example.com/idempotency',
          }),
        )
        .mutation(() => 1),
    });
    const response = await mutate(await serve(router), 'pay', undefined);
    expect(response.body.error.data).toMatchObject({
      mine: true,
      idempotency: {
        code: 'idempotency_key_missing',
        type: 'https://api.example.com/idempotency#idempotency_key_missing',
        status: 400,
        title: 'Idempotency-Key is missing',
      },
    });
  });

  it('X2: idempotencyErrorData is undefined for every other error', () => {
    expect(idempotencyErrorData(new Error('boom'))).toBeUndefined();
  });
});
