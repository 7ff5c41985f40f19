/**
 * The plain Envelop plugin, no GraphQL Yoga anywhere: typed GraphQLErrors with
 * `extensions.code` / `extensions.http`, the replay marker in `extensions`, keys read from a
 * Node-style `context.req.headers`.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { envelop, useEngine, useMaskedErrors, useSchema, type Plugin } from '@envelop/core';
import { execute, GraphQLError, parse, specifiedRules, subscribe, validate, type ExecutionResult } from 'graphql';
import { MemoryStore } from '@idem/core';
import { useIdempotency, useYogaIdempotency, type IdempotencyOptions } from '../src/index.ts';
import { createShop, type Shop } from './fixtures/shop.ts';
import { storeTargets, type OpenStore } from './fixtures/stores.ts';
import { unreachableStores } from '../../drizzle/test/unreachable-stores.ts';

// The shop schema is built with graphql-yoga's `createSchema`, which Node loads with graphql's
// index.js: give our code that same graphql instance (see yoga.test.ts).

interface NodeContext {
  req: { headers: Record<string, string | string[] | undefined> };
  user: string;
}

function createRunner(shop: Shop, idempotency: Plugin<any>, extra: Plugin<any>[] = []) {
  const getEnveloped = envelop({
    plugins: [
      useEngine({ parse, validate, execute, subscribe, specifiedRules }),
      useSchema(shop.schema),
      idempotency,
      ...extra,
    ],
  });
  return async (
    source: string,
    context: NodeContext,
    variableValues?: Record<string, unknown>,
  ): Promise<ExecutionResult> => {
    const { parse, validate, contextFactory, execute, schema } = getEnveloped(context);
    const document = parse(source);
    const errors = validate(schema, document);
    if (errors.length > 0) return { errors };
    return execute({ schema, document, contextValue: await contextFactory(), variableValues });
  };
}

const nodeContext = (key: string | undefined, user = 'alice'): NodeContext => ({
  req: { headers: key === undefined ? {} : { 'idempotency-key': key } },
  user,
});
const CREATE_ORDER = 'mutation { createOrder(input: { amount: 5, currency: "EUR" }) { id } }';

describe.each(storeTargets)('@idem/envelop in plain Envelop over $name', (target) => {
  let opened: OpenStore;
  beforeAll(async () => {
    opened = await target.open();
  });
  afterAll(async () => {
    await opened?.close();
  });
  const options = (overrides: Partial<IdempotencyOptions<NodeContext>> = {}): IdempotencyOptions<NodeContext> => ({
    store: opened.store,
    principal: (context) => context.user,
    ...overrides,
  });

  it('E2: replays a header-key mutation from context.req.headers and marks it in extensions.idempotency', async () => {
    const shop = createShop();
    const run = createRunner(shop, useIdempotency(options()));
    const key = randomUUID();
    const first = await run(CREATE_ORDER, nodeContext(key));
    const replay = await run(CREATE_ORDER, nodeContext(key));

    expect(first).toEqual({ data: { createOrder: { id: 'order-1' } } });
    expect(replay).toEqual({
      data: { createOrder: { id: 'order-1' } },
      extensions: { idempotency: { replayed: true } },
    });
    expect(shop.calls.createOrder).toBe(1);
  });

  it('X3/E3: a refusal is a GraphQLError with extensions.code and extensions.http (status, Retry-After)', async () => {
    const shop = createShop();
    const run = createRunner(shop, useIdempotency(options()));
    const key = randomUUID();
    const release = shop.hold();
    const first = run(CREATE_ORDER, nodeContext(key));
    await vi.waitFor(() => expect(shop.calls.createOrder).toBe(1));
    const concurrent = await run(CREATE_ORDER, nodeContext(key));
    release();
    await first;

    const [error] = concurrent.errors ?? [];
    expect(error).toBeInstanceOf(GraphQLError);
    expect(error!.extensions).toMatchObject({
      code: 'IDEMPOTENCY_REQUEST_IN_PROGRESS',
      http: { status: 409, headers: { 'Retry-After': expect.stringMatching(/^\d+$/) } },
      idempotency: {
        status: 409,
        code: 'idempotency_request_in_progress',
        title: 'Server processing previous request',
      },
    });
    expect(concurrent.data).toBeUndefined();
  });

  it('E4: with useMaskedErrors, a replayed resolver error is masked like the first one', async () => {
    const shop = createShop();
    const run = createRunner(shop, useIdempotency(options()), [useMaskedErrors()]);
    const key = randomUUID();
    const charge = 'mutation { chargeCard(amount: 1) { id } }';
    const first = await run(charge, nodeContext(key));
    const replay = await run(charge, nodeContext(key));

    expect(first.errors?.[0]?.message).toBe('Unexpected error.');
    expect(replay.errors?.map((error) => error.message)).toEqual(['Unexpected error.']);
    expect(replay.extensions).toEqual({ idempotency: { replayed: true } });
    expect(shop.calls.chargeCard).toBe(1);
  });

  it('useYogaIdempotency outside Yoga behaves as the Envelop plugin', async () => {
    const shop = createShop();
    const run = createRunner(shop, useYogaIdempotency(options()));
    const key = randomUUID();
    await run(CREATE_ORDER, nodeContext(key));
    const replay = await run(CREATE_ORDER, nodeContext(key));

    expect(replay.extensions).toEqual({ idempotency: { replayed: true } });
    expect(shop.calls.createOrder).toBe(1);
  });

  it('reads keys from wherever getHeaders says, and argument keys with header: false', async () => {
    const shop = createShop();
    const custom = createRunner(
      shop,
      useIdempotency(
        options({
          getHeaders: (context) => ({ 'Idempotency-Key': context.user === 'alice' ? 'from-elsewhere' : undefined }),
        }),
      ),
    );
    const headerless = createRunner(shop, useIdempotency(options({ key: { header: false }, required: true })));
    await custom(CREATE_ORDER, nodeContext(undefined));
    const replay = await custom(CREATE_ORDER, nodeContext(undefined));
    const refused = await headerless(CREATE_ORDER, nodeContext(randomUUID()));

    expect(replay.extensions).toEqual({ idempotency: { replayed: true } });
    expect(refused.errors?.[0]?.extensions).toMatchObject({ code: 'IDEMPOTENCY_KEY_MISSING', http: { status: 400 } });
    expect(refused.errors?.[0]?.message).toBe(
      'Mutation.createOrder is idempotent and requires a key: send an `idempotencyKey` argument or an @idempotent(key:) directive.',
    );
    expect(shop.calls.createOrder).toBe(1);
  });
});

describe.each(unreachableStores)('@idem/envelop on a store that cannot reach its database ($name)', ({ open }) => {
  let unreachable: Awaited<ReturnType<typeof open>>;
  beforeAll(async () => {
    unreachable = await open();
  });
  afterAll(async () => {
    await unreachable?.close();
  });

  it('E5: plain Envelop answers a GraphQLError with extensions.http 503 and Retry-After, and does not run the resolver', async () => {
    const shop = createShop();
    const run = createRunner(
      shop,
      useIdempotency<NodeContext>({
        store: unreachable.store,
        principal: (context) => context.user,
        unavailableRetryAfter: 3,
      }),
    );
    const result = await run(CREATE_ORDER, nodeContext(randomUUID()));

    expect(result.errors?.[0]?.extensions).toMatchObject({
      code: 'IDEMPOTENCY_STORE_UNAVAILABLE',
      http: { status: 503, headers: { 'Retry-After': '3' } },
    });
    expect(shop.calls.createOrder).toBeUndefined();
  });
});

describe('@idem/envelop configuration', () => {
  it('R1: retention reaches the engine as it is given, 24 hours by default', () => {
    const store = new MemoryStore();
    const principal = () => 'alice';
    expect(useIdempotency({ store, principal, retention: '2h' }).engine.policy.retentionMs).toBe(7_200_000);
    expect(useIdempotency({ store, principal }).engine.policy.retentionMs).toBe(86_400_000);
  });

  it('refuses to start without a principal resolver (S1)', () => {
    expect(() => useIdempotency({ store: new MemoryStore() } as unknown as IdempotencyOptions)).toThrow(
      /\[idem\] useIdempotency needs a `principal\(context\)`/,
    );
  });
});
