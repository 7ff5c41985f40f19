/**
 * Hardening (issue 14): defects an adversarial black-box pass found, pinned through a real tRPC
 * HTTP server. Each test failed before its fix.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initTRPC, TRPCError } from '@trpc/server';
import { createTRPCClient, httpBatchLink, TRPCClientError } from '@trpc/client';
import { z } from 'zod';
import { MemoryStore, type IdempotencyStore } from '@idem/core';
import { idempotency, idempotencyErrorFormatter, type IdempotencyContext } from '../src/index.ts';
import { idempotencyLink } from '../src/link.ts';
import { newKey, startStandalone, type RunningServer } from './http.ts';
import { storeTargets } from './stores.ts';

/** The JSON text of `{"tree": [[[…1…]]]}`, `depth` arrays deep, written without recursion. */
const deepTree = (depth: number) => `{"tree":${'['.repeat(depth)}1${']'.repeat(depth)}}`;

describe('a deeply nested input (issue 14, item 15)', () => {
  let server: RunningServer;
  let runs = 0;

  beforeAll(async () => {
    const t = initTRPC
      .context<IdempotencyContext & { user: string }>()
      .create({ errorFormatter: idempotencyErrorFormatter, isDev: false });
    const idempotent = idempotency({ store: new MemoryStore(), principal: (ctx: { user: string }) => ctx.user });
    const router = t.router({
      saveTree: t.procedure
        .input(z.object({ tree: z.unknown() }))
        .use(idempotent)
        .mutation(() => ++runs),
    });
    server = await startStandalone(router);
  });
  afterAll(async () => {
    await server?.close();
  });

  it('F1/X2: is refused with 400 BAD_REQUEST idempotency_input_too_deep, not a 500, and the resolver does not run', async () => {
    const response = await fetch(`${server.url}/saveTree`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': newKey() },
      body: deepTree(10_000),
    });
    const body = await response.json();
    expect(response.status).toBe(400);
    expect(body.error.data).toMatchObject({
      code: 'BAD_REQUEST',
      httpStatus: 400,
      idempotency: { code: 'idempotency_input_too_deep', status: 400 },
    });
    expect(runs).toBe(0);
  });
});

/** A router whose mutations take their key from the input, so one batch carries several keys. */
function batchApp(store: IdempotencyStore) {
  const runs = { place: 0, reserve: 0 };
  const t = initTRPC
    .context<IdempotencyContext & { user: string }>()
    .create({ errorFormatter: idempotencyErrorFormatter, isDev: false });
  const idempotent = idempotency({ store, principal: (ctx: { user: string }) => ctx.user, key: { header: false } });
  const keyed = z.object({ idempotencyKey: z.string(), amount: z.number().optional(), name: z.string().optional() });
  const router = t.router({
    place: t.procedure
      .input(keyed)
      .use(idempotent)
      .mutation(({ input }) => ({ order: `ord_${++runs.place}`, amount: input.amount })),
    // A business error that happens to be CONFLICT: stored (E4) and replayed like any outcome.
    reserve: t.procedure
      .input(keyed)
      .use(idempotent)
      .mutation(({ input }) => {
        runs.reserve++;
        throw new TRPCError({ code: 'CONFLICT', message: `the name ${input.name} is taken` });
      }),
  });
  return { router, runs };
}

/** POSTs one tRPC batch (`?batch=1`) of `calls` and answers the status, headers and per-call bodies. */
async function postBatch(url: string, calls: Array<[path: string, input: unknown]>) {
  const paths = calls.map(([path]) => path).join(',');
  const body = Object.fromEntries(calls.map(([, input], index) => [String(index), input]));
  const response = await fetch(`${url}/${paths}?batch=1`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return {
    status: response.status,
    replayed: response.headers.get('idempotent-replayed'),
    results: (await response.json()) as Array<Record<string, any>>,
  };
}

describe.each(storeTargets)('a tRPC batch with replayed and executed calls on $name (issue 14, item 9)', (target) => {
  let store: IdempotencyStore;
  let closeStore: () => Promise<void>;
  let app: ReturnType<typeof batchApp>;
  let server: RunningServer;

  beforeAll(async () => {
    ({ store, close: closeStore } = await target.open());
    app = batchApp(store);
    server = await startStandalone(app.router);
  });
  afterAll(async () => {
    await server?.close();
    await closeStore?.();
  });

  it('E2: Idempotent-Replayed is not set on a batch in which some calls executed, and is set once every call was a replay', async () => {
    const [done, fresh] = [newKey(), newKey()];
    const first = await postBatch(server.url, [['place', { idempotencyKey: done, amount: 1 }]]);
    expect(first.replayed).toBeNull();

    const mixed = await postBatch(server.url, [
      ['place', { idempotencyKey: done, amount: 1 }],
      ['place', { idempotencyKey: fresh, amount: 2 }],
    ]);
    expect(mixed.status).toBe(200);
    expect(mixed.replayed).toBeNull();
    expect(mixed.results[0]!.result.data).toEqual(first.results[0]!.result.data);
    expect(mixed.results[1]!.result.data).toMatchObject({ amount: 2 });

    const replays = await postBatch(server.url, [
      ['place', { idempotencyKey: done, amount: 1 }],
      ['place', { idempotencyKey: fresh, amount: 2 }],
    ]);
    expect(replays.replayed).toBe('true');
    expect(replays.results.map((result) => result.result.data)).toEqual(
      mixed.results.map((result) => result.result.data),
    );
  });

  it('E2/X2: in a batch, a replayed stored error carries error.data.idempotentReplayed; an error raised by this call does not', async () => {
    const [taken, other] = [newKey(), newKey()];
    const first = await postBatch(server.url, [['reserve', { idempotencyKey: taken, name: 'ada' }]]);
    expect(first.results[0]!.error.data).toMatchObject({ code: 'CONFLICT', httpStatus: 409 });
    expect(first.results[0]!.error.data.idempotentReplayed).toBeUndefined();

    const mixed = await postBatch(server.url, [
      ['reserve', { idempotencyKey: taken, name: 'ada' }],
      ['reserve', { idempotencyKey: other, name: 'bob' }],
    ]);
    expect(mixed.replayed).toBeNull();
    expect(mixed.results[0]!.error.data).toMatchObject({ code: 'CONFLICT', idempotentReplayed: true });
    expect(mixed.results[1]!.error.data.idempotentReplayed).toBeUndefined();
  });

  it('E2: idempotencyLink does not retry a replayed stored CONFLICT sent in a batch beside a call that executed', async () => {
    const taken = newKey();
    await postBatch(server.url, [['reserve', { idempotencyKey: taken, name: 'ada' }]]);
    const before = { ...app.runs };
    let requests = 0;
    const trpc = createTRPCClient<typeof app.router>({
      links: [
        idempotencyLink({
          retention: '24h',
          key: { header: false },
          maxAttempts: 3,
          initialDelayMs: 10,
          maxDelayMs: 20,
        }),
        httpBatchLink({ url: server.url, fetch: (input, init) => (requests++, fetch(input, init as RequestInit)) }),
      ],
    });
    const [reserved, placed] = await Promise.allSettled([
      trpc.reserve.mutate({ idempotencyKey: taken, name: 'ada' }),
      trpc.place.mutate({ idempotencyKey: newKey(), amount: 3 }),
    ]);
    expect(placed).toMatchObject({ status: 'fulfilled', value: { amount: 3 } });
    expect(reserved.status).toBe('rejected');
    const error = (reserved as PromiseRejectedResult).reason;
    expect(error).toBeInstanceOf(TRPCClientError);
    expect(error.data).toMatchObject({ code: 'CONFLICT', idempotentReplayed: true });
    expect(requests).toBe(1);
    expect(app.runs).toEqual({ reserve: before.reserve, place: before.place + 1 });
  });
});
