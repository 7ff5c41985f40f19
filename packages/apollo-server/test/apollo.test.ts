/**
 * Black-box behaviour of @idem/apollo-server through Apollo Server 5 over real HTTP:
 * `startStandaloneServer` and `@as-integrations/express5`, on SQLite and PostgreSQL (and memory).
 * The same rules, statuses and codes as the Yoga path (../../envelop/test/yoga.test.ts). Rule ids
 * refer to ../../../docs/spec.md.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ApolloServer } from '@apollo/server';
import { unwrapResolverError } from '@apollo/server/errors';
import { GraphQLError } from 'graphql';
import { MemoryStore } from '@idem/core';
import { startStandaloneServer } from '@apollo/server/standalone';
import { expressMiddleware } from '@as-integrations/express5';
import express from 'express';
import { useApolloIdempotency, type ApolloIdempotencyOptions } from '../src/index.ts';
import { createShop, type Shop } from '../../envelop/test/fixtures/shop.ts';
import { graphqlClient } from '../../envelop/test/fixtures/http.ts';
import { storeTargets, type OpenStore } from '../../envelop/test/fixtures/stores.ts';
import { unreachableStores } from '../../drizzle/test/unreachable-stores.ts';

interface Context {
  user: string;
}

const CREATE_ORDER = /* GraphQL */ `
  mutation CreateOrder($input: OrderInput!) {
    createOrder(input: $input) { id amount currency }
  }
`;
const order = (amount = 4200, currency = 'EUR') => ({
  query: CREATE_ORDER,
  variables: { input: { amount, currency } },
});
const keyHeader = (key: string, user = 'alice') => ({ 'idempotency-key': `"${key}"`, 'x-user': user });
const userOf = (headers: Record<string, string | string[] | undefined>) => String(headers['x-user'] ?? 'anonymous');

type Host = 'standalone' | 'express5';

async function startApollo(host: Host, shop: Shop, options: ApolloIdempotencyOptions<Context>) {
  const apollo = new ApolloServer<Context>({
    schema: shop.schema,
    allowBatchedHttpRequests: true,
    plugins: [useApolloIdempotency<Context>(options)],
  });
  if (host === 'standalone') {
    const { url } = await startStandaloneServer(apollo, {
      listen: { port: 0, host: '127.0.0.1' },
      context: async ({ req }) => ({ user: userOf(req.headers) }),
    });
    return { url, stop: () => apollo.stop() };
  }
  await apollo.start();
  const app = express();
  app.use(
    '/graphql',
    express.json(),
    expressMiddleware(apollo, { context: async ({ req }) => ({ user: userOf(req.headers) }) }),
  );
  const server: Server = createServer(app);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/graphql`,
    async stop() {
      await apollo.stop();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

describe.each(storeTargets)('@idem/apollo-server over $name', (target) => {
  let opened: OpenStore;
  beforeAll(async () => {
    opened = await target.open();
  });
  afterAll(async () => {
    await opened?.close();
  });

  describe.each<Host>(['standalone', 'express5'])('on %s', (host) => {
    let shop: Shop;
    let stop: () => Promise<void>;
    let post: ReturnType<typeof graphqlClient>;
    beforeEach(async () => {
      shop = createShop();
      const started = await startApollo(host, shop, {
        store: opened.store,
        principal: (context) => context.user,
        required: ['placeOrder'],
      });
      stop = started.stop;
      post = graphqlClient(fetch, started.url);
    });
    afterEach(async () => {
      await stop();
    });

    it('E1, E2: a retried mutation with the same header key replays the stored result and does not run the resolver again', async () => {
      const key = randomUUID();
      const first = await post(order(), keyHeader(key));
      expect(first.status).toBe(200);
      expect(first.body.data.createOrder.amount).toBe(4200);
      expect(first.headers.get('idempotent-replayed')).toBeNull();
      const second = await post(order(), keyHeader(key));
      expect(second.status).toBe(200);
      expect(second.headers.get('idempotent-replayed')).toBe('true');
      expect(second.body.data).toEqual(first.body.data);
      expect(second.body.extensions).toEqual({ idempotency: { replayed: true } });
      expect(shop.calls['createOrder']).toBe(1);
    });

    it('F1, X3: the same key with another input is refused with 422 IDEMPOTENCY_KEY_REUSED and a problem type link', async () => {
      const key = randomUUID();
      await post(order(4200), keyHeader(key));
      const reused = await post(order(9900), keyHeader(key));
      expect(reused.status).toBe(422);
      expect(reused.body.errors[0].extensions.code).toBe('IDEMPOTENCY_KEY_REUSED');
      expect(reused.body.errors[0].extensions.http).toBeUndefined();
      expect(reused.body.errors[0].extensions.idempotency.type).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/idempotency#/);
      expect(shop.calls['createOrder']).toBe(1);
    });

    it('E3: a retry while the first is still running is refused with 409 and Retry-After', async () => {
      const key = randomUUID();
      const release = shop.hold();
      const first = post(order(), keyHeader(key));
      await expect.poll(() => shop.calls['createOrder']).toBe(1);
      const second = await post(order(), keyHeader(key));
      expect(second.status).toBe(409);
      expect(second.headers.get('retry-after')).toMatch(/^\d+$/);
      expect(second.body.errors[0].extensions.code).toBe('IDEMPOTENCY_REQUEST_IN_PROGRESS');
      release();
      expect((await first).status).toBe(200);
      expect(shop.calls['createOrder']).toBe(1);
    });

    it('K2: a required mutation without a key is refused with 400 IDEMPOTENCY_KEY_MISSING and does not run', async () => {
      const missing = await post(
        { query: 'mutation { placeOrder(input: { amount: 1, currency: "EUR" }) { id } }' },
        { 'x-user': 'alice' },
      );
      expect(missing.status).toBe(400);
      expect(missing.body.errors[0].extensions.code).toBe('IDEMPOTENCY_KEY_MISSING');
      expect(shop.calls['placeOrder']).toBeUndefined();
    });

    it('K4: an argument key makes its root field a unit of its own, replayed on its own', async () => {
      const key = randomUUID();
      const query = (other: string) =>
        `mutation { a: createOrder(input: { amount: 1, currency: "EUR" }, idempotencyKey: "${key}") { id } b: createOrder(input: { amount: 2, currency: "EUR" }, idempotencyKey: "${other}") { id } }`;
      const first = await post({ query: query(randomUUID()) }, { 'x-user': 'alice' });
      expect(first.body.errors).toBeUndefined();
      const second = await post({ query: query(randomUUID()) }, { 'x-user': 'alice' });
      expect(second.status).toBe(200);
      expect(second.body.data.a).toEqual(first.body.data.a);
      expect(second.body.data.b).not.toEqual(first.body.data.b);
      expect(second.body.extensions).toEqual({ idempotency: { replayed: false, replayedFields: ['a'] } });
      expect(second.headers.get('idempotent-replayed')).toBeNull();
      expect(shop.calls['createOrder']).toBe(3);
    });

    it('S1: the same key of another principal is another record', async () => {
      const key = randomUUID();
      await post(order(), keyHeader(key, 'alice'));
      const bob = await post(order(), keyHeader(key, 'bob'));
      expect(bob.headers.get('idempotent-replayed')).toBeNull();
      expect(shop.calls['createOrder']).toBe(2);
    });

    it('K2: an Idempotency-Key header on a batched request is refused with 400 IDEMPOTENCY_KEY_AMBIGUOUS and nothing runs', async () => {
      const batch = await post([order(1), order(2)], keyHeader(randomUUID()));
      expect(batch.status).toBe(400);
      expect(batch.body.map((result: any) => result.errors[0].extensions.code)).toEqual([
        'IDEMPOTENCY_KEY_AMBIGUOUS',
        'IDEMPOTENCY_KEY_AMBIGUOUS',
      ]);
      expect(shop.calls['createOrder']).toBeUndefined();
    });

    it('queries pass through Apollo execution untouched', async () => {
      const result = await post({ query: '{ orderCount }' }, keyHeader(randomUUID()));
      expect(result.status).toBe(200);
      expect(result.body.data).toEqual({ orderCount: 0 });
    });

    it('K4: @idempotent on a field that is not a root mutation field is refused with 400 before anything runs', async () => {
      const result = await post(
        { query: 'mutation { createOrder(input: { amount: 1, currency: "EUR" }) { id @idempotent(key: "k") } }' },
        { 'x-user': 'alice' },
      );
      expect(result.status).toBe(400);
      expect(shop.calls['createOrder']).toBeUndefined();
    });
  });
});

describe('@idem/apollo-server formatError', () => {
  it('X3: formatError masks an unexpected resolver error in the first answer and in its replay alike', async () => {
    const shop = createShop();
    const started = await startApollo('standalone', shop, {
      store: new MemoryStore(),
      principal: (context) => context.user,
      formatError: (formatted, error) =>
        unwrapResolverError(error) instanceof GraphQLError ? formatted : { ...formatted, message: 'Unexpected error.' },
    });
    try {
      const post = graphqlClient(fetch, started.url);
      const headers = keyHeader(randomUUID());
      const first = await post({ query: 'mutation { chargeCard(amount: 5) { id } }' }, headers);
      const replay = await post({ query: 'mutation { chargeCard(amount: 5) { id } }' }, headers);
      expect(first.body.errors[0].message).toBe('Unexpected error.');
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(replay.body.errors[0].message).toBe('Unexpected error.');
      expect(shop.calls['chargeCard']).toBe(1);
    } finally {
      await started.stop();
    }
  });
});

describe("CSRF: a mutation a web page can send without asking (Apollo Server's own csrfPrevention)", () => {
  it('refuses a mutation posted as a plain form (urlencoded, multipart, text/plain) on both hosts, and nothing runs — the requests the Yoga path refuses', async () => {
    for (const host of ['standalone', 'express5'] as const) {
      const shop = createShop();
      const started = await startApollo(host, shop, { store: new MemoryStore(), principal: (context) => context.user });
      try {
        const query = 'mutation { placeOrder(input: { amount: 5, currency: "EUR" }, idempotencyKey: "k-1") { id } }';
        const multipart = new FormData();
        multipart.set('operations', JSON.stringify({ query }));
        multipart.set('map', '{}');
        for (const body of [new URLSearchParams({ query }), multipart, query]) {
          const response = await fetch(started.url, { method: 'POST', body });
          expect(response.status, `${host} ${typeof body}`).toBe(400);
          expect(await response.text()).toMatch(/CSRF/);
        }
        expect(shop.calls).toEqual({});
      } finally {
        await started.stop();
      }
    }
  });
});

describe.each(unreachableStores)('@idem/apollo-server with an unreachable store ($name)', (target) => {
  it('E7: a mutation is refused with 503 IDEMPOTENCY_STORE_UNAVAILABLE and Retry-After, and does not run', async () => {
    const unreachable = await target.open();
    const shop = createShop();
    const started = await startApollo('standalone', shop, {
      store: unreachable.store,
      principal: (context) => context.user,
    });
    try {
      const result = await graphqlClient(fetch, started.url)(order(), keyHeader(randomUUID()));
      expect(result.status).toBe(503);
      expect(result.headers.get('retry-after')).toMatch(/^\d+$/);
      expect(result.body.errors[0].extensions.code).toBe('IDEMPOTENCY_STORE_UNAVAILABLE');
      expect(shop.calls['createOrder']).toBeUndefined();
    } finally {
      await started.stop();
      await unreachable.close();
    }
  });
});
