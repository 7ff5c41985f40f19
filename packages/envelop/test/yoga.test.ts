/**
 * Black-box behaviour of @idem/envelop through GraphQL Yoga (`yoga.fetch` and one real HTTP
 * server), on every store: memory, SQLite and PostgreSQL. Rule ids refer to ../../../docs/spec.md.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { createYoga } from 'graphql-yoga';
import { useYogaIdempotency, type IdempotencyOptions, type YogaIdempotencyOptions } from '../src/index.ts';
import { deriveKey, formatScope } from '@idem/core';
import { createShop, type Shop } from './fixtures/shop.ts';
import { graphqlClient, type GraphQLRequestBody } from './fixtures/http.ts';
import { storeTargets, type OpenStore } from './fixtures/stores.ts';
import { unreachableStores } from '../../drizzle/test/unreachable-stores.ts';

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

describe.each(storeTargets)('@idem/envelop with GraphQL Yoga over $name', (target) => {
  let opened: OpenStore;
  let shop: Shop;
  let yoga: ReturnType<typeof createYoga>;
  let post: ReturnType<typeof graphqlClient>;

  const createApp = (options: Partial<YogaIdempotencyOptions> = {}) => {
    const app = createYoga({
      schema: shop.schema,
      batching: true,
      logging: false,
      plugins: [
        useYogaIdempotency({
          store: opened.store,
          principal: ({ request }) => request.headers.get('x-user') ?? 'anonymous',
          required: ['placeOrder'],
          ...options,
        }),
      ],
    });
    return { app, post: graphqlClient((url, init) => app.fetch(url, init)) };
  };

  beforeAll(async () => {
    opened = await target.open();
  });
  afterAll(async () => {
    await opened?.close();
  });
  beforeEach(() => {
    shop = createShop();
    ({ app: yoga, post } = createApp());
  });

  describe('header key: the operation is the unit', () => {
    it('E2: replays the stored result with Idempotent-Replayed and extensions.idempotency, without running the resolver again', async () => {
      const key = randomUUID();
      const first = await post(order(), keyHeader(key));
      const second = await post(order(), keyHeader(key));

      expect(first.status).toBe(200);
      expect(first.headers.get('idempotent-replayed')).toBeNull();
      expect(first.body).toEqual({ data: { createOrder: { id: 'order-1', amount: 4200, currency: 'EUR' } } });
      expect(second.status).toBe(200);
      expect(second.headers.get('idempotent-replayed')).toBe('true');
      expect(second.body).toEqual({ ...first.body, extensions: { idempotency: { replayed: true } } });
      expect(shop.calls.createOrder).toBe(1);
    });

    it('F1: whitespace, comments, the operation name and the order of variable definitions do not change the fingerprint', async () => {
      const key = randomUUID();
      const query =
        'mutation A($amount: Int!, $currency: String!) { createOrder(input: { amount: $amount, currency: $currency }) { id amount currency } }';
      const reformatted = `
        # retried by another client build
        mutation B($currency: String!,
                   $amount: Int!) {
          createOrder(input: { amount: $amount, currency: $currency }) { id   amount currency }
        }`;
      const first = await post({ query, variables: { amount: 10, currency: 'EUR' } }, keyHeader(key));
      const retry = await post({ query: reformatted, variables: { currency: 'EUR', amount: 10 } }, keyHeader(key));

      expect(first.body.data.createOrder.id).toBe('order-1');
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(shop.calls.createOrder).toBe(1);
    });

    it('F3: answers 422 IDEMPOTENCY_KEY_REUSED when the variables change, and executes nothing', async () => {
      const key = randomUUID();
      await post(order(4200), keyHeader(key));
      const reuse = await post(order(9900), keyHeader(key));

      expect(reuse.status).toBe(422);
      expect(reuse.body.data).toBeUndefined();
      expect(reuse.body.errors[0].extensions).toMatchObject({
        code: 'IDEMPOTENCY_KEY_REUSED',
        idempotency: {
          status: 422,
          code: 'idempotency_key_reused',
          type: 'http://yoga/idempotency#idempotency_key_reused',
        },
      });
      expect(reuse.body.errors[0].extensions.http).toBeUndefined();
      expect(shop.calls.createOrder).toBe(1);
    });

    it('F1/F3: a changed selection set is a different request: 422', async () => {
      const key = randomUUID();
      await post(order(), keyHeader(key));
      const wider = await post(
        {
          query: CREATE_ORDER.replace('id amount currency', 'id amount currency status'),
          variables: order().variables,
        },
        keyHeader(key),
      );

      expect(wider.status).toBe(422);
      expect(wider.body.errors[0].extensions.code).toBe('IDEMPOTENCY_KEY_REUSED');
      expect(shop.calls.createOrder).toBe(1);
    });

    it('E3: answers 409 with Retry-After while the first request runs, and the resolver runs once', async () => {
      const key = randomUUID();
      const release = shop.hold();
      const first = post(order(), keyHeader(key));
      await vi.waitFor(() => expect(shop.calls.createOrder).toBe(1));
      const concurrent = await post(order(), keyHeader(key));
      release();
      const done = await first;

      expect(concurrent.status).toBe(409);
      expect(Number(concurrent.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      expect(concurrent.body.errors[0].extensions).toMatchObject({
        code: 'IDEMPOTENCY_REQUEST_IN_PROGRESS',
        idempotency: { status: 409, retryAfter: Number(concurrent.headers.get('retry-after')) },
      });
      expect(done.status).toBe(200);
      const retry = await post(order(), keyHeader(key));
      expect(retry.body.data).toEqual(done.body.data);
      expect(shop.calls.createOrder).toBe(1);
    });

    it('E4: a resolver error is stored and replayed exactly, masked the same way', async () => {
      const key = randomUUID();
      const charge = { query: 'mutation { chargeCard(amount: 100) { id } }' };
      const first = await post(charge, keyHeader(key));
      const replay = await post(charge, keyHeader(key));

      expect(first.body.errors[0]).toMatchObject({
        message: 'Unexpected error.',
        path: ['chargeCard'],
        locations: [{ line: 1, column: 12 }],
      });
      expect(replay.status).toBe(first.status);
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      const { extensions, ...replayed } = replay.body;
      expect(replayed).toEqual(first.body);
      expect(JSON.stringify(replayed)).toBe(JSON.stringify(first.body));
      expect(extensions).toEqual({ idempotency: { replayed: true } });
      expect(shop.calls.chargeCard).toBe(1);
    });

    it('E4: parse, validation and variable errors are not stored: the same key then executes', async () => {
      const key = randomUUID();
      const parseError = await post({ query: 'mutation { createOrder(' }, keyHeader(key));
      const validationError = await post(
        { query: 'mutation { createOrder(input: {amount: 1, currency: "EUR"}) { nope } }' },
        keyHeader(key),
      );
      const variableError = await post(
        { query: CREATE_ORDER, variables: { input: { amount: 'many' } } },
        keyHeader(key),
      );
      const valid = await post(order(), keyHeader(key));

      expect(parseError.status).toBe(400);
      expect(validationError.status).toBe(400);
      expect(variableError.body.errors[0].message).toMatch(/amount/);
      expect(valid.status).toBe(200);
      expect(valid.headers.get('idempotent-replayed')).toBeNull();
      expect(valid.body.data.createOrder.id).toBe('order-1');
      expect(shop.calls.createOrder).toBe(1);
    });

    it('S1: the same key from another principal is another record, never a replay', async () => {
      const key = randomUUID();
      const alice = await post(order(), keyHeader(key, 'alice'));
      const bob = await post(order(), keyHeader(key, 'bob'));

      expect(bob.headers.get('idempotent-replayed')).toBeNull();
      expect(bob.body.data.createOrder.id).not.toBe(alice.body.data.createOrder.id);
      expect(shop.calls.createOrder).toBe(2);
    });

    it('S1: the same key on another mutation is another record', async () => {
      const key = randomUUID();
      await post(order(), keyHeader(key));
      const other = await post({ query: 'mutation { sendReceipt(orderId: "order-1") }' }, keyHeader(key));

      expect(other.status).toBe(200);
      expect(other.headers.get('idempotent-replayed')).toBeNull();
      expect(shop.calls.sendReceipt).toBe(1);
    });

    it('K3: refuses an invalid key with 400 IDEMPOTENCY_KEY_INVALID and executes nothing', async () => {
      const response = await post(order(), { 'idempotency-key': 'has spaces in it', 'x-user': 'alice' });

      expect(response.status).toBe(400);
      expect(response.body.errors[0].extensions.code).toBe('IDEMPOTENCY_KEY_INVALID');
      expect(shop.calls.createOrder).toBeUndefined();
    });

    it('leaves queries alone, key or not', async () => {
      const key = randomUUID();
      const first = await post({ query: '{ orderCount }' }, keyHeader(key));
      await post(order(), {});
      const second = await post({ query: '{ orderCount }' }, keyHeader(key));

      expect(first.body).toEqual({ data: { orderCount: 0 } });
      expect(second.body).toEqual({ data: { orderCount: 1 } });
      expect(second.headers.get('idempotent-replayed')).toBeNull();
    });
  });

  describe('argument and directive keys: the field is the unit', () => {
    const byArgument = (key: string, amount = 500) => ({
      query:
        'mutation Pay($key: String, $amount: Int!) { createOrder(input: { amount: $amount, currency: "EUR" }, idempotencyKey: $key) { id amount } }',
      variables: { key, amount },
    });

    it('K4: an idempotencyKey argument replays its field, marked like a header replay', async () => {
      const key = randomUUID();
      const first = await post(byArgument(key), { 'x-user': 'alice' });
      const second = await post(byArgument(key), { 'x-user': 'alice' });

      expect(second.status).toBe(200);
      expect(second.headers.get('idempotent-replayed')).toBe('true');
      expect(second.body).toEqual({
        data: first.body.data,
        extensions: { idempotency: { replayed: true, replayedFields: ['createOrder'] } },
      });
      expect(shop.calls.createOrder).toBe(1);
    });

    it('K4: the @idempotent(key:) directive does the same, and a new alias receives the stored value', async () => {
      const key = randomUUID();
      const query = (alias: string) =>
        `mutation { ${alias}: createOrder(input: { amount: 7, currency: "USD" }) @idempotent(key: "${key}") { id amount } }`;
      const first = await post({ query: query('first') }, { 'x-user': 'alice' });
      const second = await post({ query: query('again') }, { 'x-user': 'alice' });

      expect(first.body.data.first).toEqual({ id: 'order-1', amount: 7 });
      expect(second.body.data).toEqual({ again: first.body.data.first });
      expect(second.headers.get('idempotent-replayed')).toBe('true');
      expect(shop.calls.createOrder).toBe(1);
    });

    it('S1: a field key from another principal is another record', async () => {
      const key = randomUUID();
      const alice = await post(byArgument(key), { 'x-user': 'alice' });
      const bob = await post(byArgument(key), { 'x-user': 'bob' });

      expect(bob.headers.get('idempotent-replayed')).toBeNull();
      expect(bob.body.data.createOrder.id).not.toBe(alice.body.data.createOrder.id);
      expect(shop.calls.createOrder).toBe(2);
    });

    it('F1: the key argument is not fingerprinted, the other arguments are: 422 on a changed amount', async () => {
      const key = randomUUID();
      await post(byArgument(key, 500), { 'x-user': 'alice' });
      const changed = await post(byArgument(key, 501), { 'x-user': 'alice' });

      expect(changed.status).toBe(422);
      expect(changed.body).toMatchObject({
        data: { createOrder: null },
        errors: [{ path: ['createOrder'], extensions: { code: 'IDEMPOTENCY_KEY_REUSED' } }],
      });
      expect(shop.calls.createOrder).toBe(1);
    });

    it('F1/F3: a changed selection set of a keyed field is a different request: 422', async () => {
      const key = randomUUID();
      await post(byArgument(key), { 'x-user': 'alice' });
      const changed = await post(
        { ...byArgument(key), query: byArgument(key).query.replace('{ id amount }', '{ id amount status }') },
        { 'x-user': 'alice' },
      );

      expect(changed.status).toBe(422);
      expect(shop.calls.createOrder).toBe(1);
    });

    it('two keyed root fields in one operation replay or execute each on its own', async () => {
      const [k1, k2, k3] = [randomUUID(), randomUUID(), randomUUID()];
      const query = (second: string) => `mutation {
        a: createOrder(input: { amount: 1, currency: "EUR" }, idempotencyKey: "${k1}") { id }
        b: createOrder(input: { amount: 2, currency: "EUR" }) @idempotent(key: "${second}") { id }
      }`;
      const first = await post({ query: query(k2) }, { 'x-user': 'alice' });
      const mixed = await post({ query: query(k3) }, { 'x-user': 'alice' });
      const replay = await post({ query: query(k3) }, { 'x-user': 'alice' });

      expect(first.body.data).toEqual({ a: { id: 'order-1' }, b: { id: 'order-2' } });
      expect(mixed.body).toEqual({
        data: { a: { id: 'order-1' }, b: { id: 'order-3' } },
        extensions: { idempotency: { replayed: false, replayedFields: ['a'] } },
      });
      expect(mixed.headers.get('idempotent-replayed')).toBeNull();
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(replay.body.extensions.idempotency).toEqual({ replayed: true, replayedFields: ['a', 'b'] });
      expect(shop.calls.createOrder).toBe(3);
    });

    it('a refusal of one field does not block the others: status 200, the error on its field, no http extension', async () => {
      const key = randomUUID();
      await post(
        { query: `mutation { createOrder(input: { amount: 1, currency: "EUR" }, idempotencyKey: "${key}") { id } }` },
        { 'x-user': 'alice' },
      );
      const response = await post(
        {
          query: `mutation {
            reused: createOrder(input: { amount: 2, currency: "EUR" }, idempotencyKey: "${key}") { id }
            fresh: createOrder(input: { amount: 3, currency: "EUR" }, idempotencyKey: "${randomUUID()}") { id }
          }`,
        },
        { 'x-user': 'alice' },
      );

      expect(response.status).toBe(200);
      expect(response.body.data).toEqual({ reused: null, fresh: { id: 'order-2' } });
      expect(response.body.errors).toHaveLength(1);
      expect(response.body.errors[0]).toMatchObject({
        path: ['reused'],
        extensions: { code: 'IDEMPOTENCY_KEY_REUSED', idempotency: { status: 422 } },
      });
      expect(response.body.errors[0].locations).toEqual([{ line: 2, column: 13 }]);
      expect(shop.calls.createOrder).toBe(2);
    });

    it('E3: a keyed field that is the only root field answers 409 with Retry-After', async () => {
      const key = randomUUID();
      const release = shop.hold();
      const first = post(byArgument(key), { 'x-user': 'alice' });
      await vi.waitFor(() => expect(shop.calls.createOrder).toBe(1));
      const concurrent = await post(byArgument(key), { 'x-user': 'alice' });
      release();
      await first;

      expect(concurrent.status).toBe(409);
      expect(concurrent.headers.get('retry-after')).toMatch(/^\d+$/);
      expect(concurrent.body).toMatchObject({
        data: { createOrder: null },
        errors: [{ path: ['createOrder'], extensions: { code: 'IDEMPOTENCY_REQUEST_IN_PROGRESS' } }],
      });
      expect(shop.calls.createOrder).toBe(1);
    });

    it('a refused non-null root field nulls data and stops the operation, as GraphQL requires', async () => {
      const key = randomUUID();
      const place = (amount: number) =>
        `placeOrder(input: { amount: ${amount}, currency: "EUR" }, idempotencyKey: "${key}") { id }`;
      await post({ query: `mutation { ${place(1)} }` }, { 'x-user': 'alice' });
      const response = await post(
        { query: `mutation { ${place(2)} sendReceipt(orderId: "order-1") @idempotent(key: "${randomUUID()}") }` },
        { 'x-user': 'alice' },
      );

      expect(response.status).toBe(422);
      expect(response.body).toMatchObject({
        data: null,
        errors: [{ path: ['placeOrder'], extensions: { code: 'IDEMPOTENCY_KEY_REUSED' } }],
      });
      expect(shop.calls.sendReceipt).toBeUndefined();
    });

    it('K4: a header key and an argument key that differ are refused with 400 IDEMPOTENCY_KEY_AMBIGUOUS; equal ones are fine', async () => {
      const [key, other] = [randomUUID(), randomUUID()];
      const ambiguous = await post(byArgument(key), keyHeader(other));
      const agreeing = await post(byArgument(key), keyHeader(key));

      expect(ambiguous.status).toBe(400);
      expect(ambiguous.body.errors[0].extensions.code).toBe('IDEMPOTENCY_KEY_AMBIGUOUS');
      expect(agreeing.status).toBe(200);
      expect(shop.calls.createOrder).toBe(1);
    });

    it('a header key covers the root fields that carry no key of their own when others do', async () => {
      const [key, header] = [randomUUID(), randomUUID()];
      const query = `mutation {
        createOrder(input: { amount: 1, currency: "EUR" }) @idempotent(key: "${key}") { id }
        sendReceipt(orderId: "order-1")
      }`;
      // The directive key differs from the header: ambiguous for createOrder.
      expect((await post({ query }, keyHeader(header))).status).toBe(400);
      await post({ query }, keyHeader(key));
      const replay = await post({ query }, keyHeader(key));

      expect(replay.body.extensions.idempotency).toEqual({
        replayed: true,
        replayedFields: ['createOrder', 'sendReceipt'],
      });
      expect(shop.calls).toEqual({ createOrder: 1, sendReceipt: 1 });
    });

    it('K2: a required mutation without any key is refused with 400 IDEMPOTENCY_KEY_MISSING; nothing else in the operation runs', async () => {
      const response = await post(
        { query: 'mutation { sendReceipt(orderId: "x") placeOrder(input: { amount: 1, currency: "EUR" }) { id } }' },
        { 'x-user': 'alice' },
      );
      const withHeader = await post(
        { query: 'mutation { placeOrder(input: { amount: 1, currency: "EUR" }) { id } }' },
        keyHeader(randomUUID()),
      );

      expect(response.status).toBe(400);
      expect(response.body.errors[0].extensions).toMatchObject({
        code: 'IDEMPOTENCY_KEY_MISSING',
        idempotency: { status: 400, type: 'http://yoga/idempotency#idempotency_key_missing' },
      });
      expect(response.body.errors[0].message).toContain('Mutation.placeOrder');
      expect(withHeader.status).toBe(200);
      expect(shop.calls).toEqual({ placeOrder: 1 });
    });

    it('K2/E4: where root fields carry their own keys, a root field with no key at all (no header key either) is refused with 400 IDEMPOTENCY_KEY_MISSING; nothing runs', async () => {
      const response = await post(
        {
          query: `mutation { createOrder(input: { amount: 1, currency: "EUR" }, idempotencyKey: "${randomUUID()}") { id } sendReceipt(orderId: "x") }`,
        },
        { 'x-user': 'alice' },
      );

      expect(response.status).toBe(400);
      expect(response.body.data).toBeUndefined();
      expect(response.body.errors[0].extensions.code).toBe('IDEMPOTENCY_KEY_MISSING');
      expect(response.body.errors[0].message).toBe(
        'Mutation.sendReceipt has no key, while other root fields of this operation carry their own: send an Idempotency-Key header or an @idempotent(key:) directive.',
      );
      expect(shop.calls).toEqual({});
    });

    it('E4: two root fields that would be one record (the same mutation under the same key) are refused with 400 IDEMPOTENCY_KEY_AMBIGUOUS; nothing runs', async () => {
      const key = randomUUID();
      const response = await post(
        {
          query: `mutation {
            a: createOrder(input: { amount: 1, currency: "EUR" }, idempotencyKey: "${key}") { id }
            b: createOrder(input: { amount: 1, currency: "EUR" }) @idempotent(key: "${key}") { id }
          }`,
        },
        { 'x-user': 'alice' },
      );

      expect(response.status).toBe(400);
      expect(response.body.errors[0].extensions.code).toBe('IDEMPOTENCY_KEY_AMBIGUOUS');
      expect(shop.calls).toEqual({});
    });

    it('refuses @idempotent anywhere but on a root mutation field', async () => {
      const response = await post({ query: `{ orderCount @idempotent(key: "k") }` }, {});

      expect(response.status).toBe(400);
      expect(response.body.errors[0].message).toBe('The @idempotent directive only applies to root mutation fields.');
    });
  });

  describe('a resolver that refuses before any side effect (HandlerNotStartedError)', () => {
    const REFUND = 'mutation Refund($amount: Int!) { refund(amount: $amount) { amount } }';
    const REFUND_BY_ARGUMENT =
      'mutation Refund($amount: Int!, $key: String) { refund(amount: $amount, idempotencyKey: $key) { amount } }';

    it('E4: with a header key, releases the claim and returns the refusal; the same key then runs with corrected input', async () => {
      const key = randomUUID();
      const refused = await post({ query: REFUND, variables: { amount: -5 } }, keyHeader(key));
      expect(refused.body.errors).toEqual([
        expect.objectContaining({ message: 'amount must be positive', extensions: { code: 'BAD_USER_INPUT' } }),
      ]);
      const corrected = await post({ query: REFUND, variables: { amount: 5 } }, keyHeader(key));
      expect(corrected.body).toEqual({ data: { refund: { amount: 5 } } });
      expect(corrected.headers.get('idempotent-replayed')).toBeNull();
      expect(shop.calls.refund).toBe(2);
    });

    it('E4: with an argument key, releases the claim of the field; the same key then runs with corrected input', async () => {
      const key = randomUUID();
      const refused = await post({ query: REFUND_BY_ARGUMENT, variables: { amount: 0, key } }, { 'x-user': 'alice' });
      expect(refused.body).toMatchObject({
        data: { refund: null },
        errors: [{ message: 'amount must be positive', path: ['refund'] }],
      });
      const corrected = await post({ query: REFUND_BY_ARGUMENT, variables: { amount: 7, key } }, { 'x-user': 'alice' });
      expect(corrected.body).toEqual({ data: { refund: { amount: 7 } } });
      const replay = await post({ query: REFUND_BY_ARGUMENT, variables: { amount: 7, key } }, { 'x-user': 'alice' });
      expect(replay.body.extensions).toEqual({ idempotency: { replayed: true, replayedFields: ['refund'] } });
      expect(shop.calls.refund).toBe(2);
    });
  });

  describe('the claim in the resolver context', () => {
    it('E6: a resolver derives a downstream key from its claim, per unit; without a key there is no claim', async () => {
      const key = randomUUID();
      const byHeader = await post({ query: 'mutation { payout(amount: 1) }' }, keyHeader(key));
      expect(byHeader.body.data.payout).toBe(
        deriveKey({ scope: formatScope('mutation:payout', 'alice'), key, generation: 1 }, 'bank'),
      );
      const byArgument = await post(
        { query: `mutation { payout(amount: 1, idempotencyKey: "${key}") }` },
        { 'x-user': 'alice' },
      );
      expect(byArgument.body.data.payout).toBe(
        deriveKey({ scope: formatScope('Mutation.payout', 'alice'), key, generation: 1 }, 'bank'),
      );
      const unkeyed = await post({ query: 'mutation { payout(amount: 1) }' }, { 'x-user': 'alice' });
      expect(unkeyed.body.data.payout).toBe('no claim');
    });
  });

  describe('Yoga batching: one header set for several operations', () => {
    it('refuses every mutation of a batch with several mutations under one header key (400), runs none, and still answers queries', async () => {
      const response = await post([order(1), order(2), { query: '{ orderCount }' }], keyHeader(randomUUID()));

      expect(response.status).toBe(200);
      expect(response.body[0].errors[0].extensions.code).toBe('IDEMPOTENCY_KEY_AMBIGUOUS');
      expect(response.body[1].errors[0].extensions.code).toBe('IDEMPOTENCY_KEY_AMBIGUOUS');
      expect(response.body[2]).toEqual({ data: { orderCount: 0 } });
      expect(shop.calls.createOrder).toBeUndefined();
    });

    it('applies a header key to the only mutation of a batch', async () => {
      const key = randomUUID();
      await post([order(), { query: '{ orderCount }' }], keyHeader(key));
      const replay = await post([order(), { query: '{ orderCount }' }], keyHeader(key));

      expect(replay.body[0].extensions).toEqual({ idempotency: { replayed: true } });
      expect(shop.calls.createOrder).toBe(1);
    });

    it('keeps argument keys working per field inside a batch', async () => {
      const [k1, k2] = [randomUUID(), randomUUID()];
      const keyed = (key: string, amount: number): GraphQLRequestBody => ({
        query: `mutation { createOrder(input: { amount: ${amount}, currency: "EUR" }, idempotencyKey: "${key}") { id } }`,
      });
      await post([keyed(k1, 1), keyed(k2, 2)], { 'x-user': 'alice' });
      const replay = await post([keyed(k1, 1), keyed(k2, 2)], { 'x-user': 'alice' });

      expect(replay.body.map((result: any) => result.extensions.idempotency.replayed)).toEqual([true, true]);
      expect(shop.calls.createOrder).toBe(2);
    });
  });

  describe("CSRF: Yoga's own useCSRFPrevention, with Idempotency-Key among its request headers", () => {
    const formPost = (query: string, headers: Record<string, string> = {}) =>
      yoga.fetch('http://yoga/graphql', { method: 'POST', headers, body: new URLSearchParams({ query }) });
    const mutation = (key: string) =>
      `mutation { placeOrder(input: { amount: 5, currency: "EUR" }, idempotencyKey: "${key}") { id } }`;

    it("refuses a mutation posted as a plain form without a preflight header with Yoga's 403, and nothing runs", async () => {
      const response = await formPost(mutation(randomUUID()), { 'x-user': 'alice' });
      expect(response.status).toBe(403);
      expect((await response.json()).errors[0].message).toBe('Required CSRF header(s) not present');
      expect(shop.calls['placeOrder']).toBeUndefined();
    });

    it('runs the same form once it carries Idempotency-Key, a header a form cannot send', async () => {
      const key = randomUUID();
      const response = await formPost(mutation(key), { 'x-user': 'alice', 'idempotency-key': `"${key}"` });
      expect(response.status).toBe(200);
      expect(shop.calls['placeOrder']).toBe(1);
    });

    it('leaves a query posted as a form alone, and csrfPrevention: false lets the mutation through', async () => {
      expect((await formPost('{ orderCount }')).status).toBe(200);
      ({ app: yoga } = createApp({ csrfPrevention: false }));
      expect((await formPost(mutation(randomUUID()), { 'x-user': 'alice' })).status).toBe(200);
    });
  });

  describe('over a real HTTP server', () => {
    let server: Server;
    let url: string;
    beforeAll(async () => {
      server = createServer((request, response) => void yoga(request, response));
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/graphql`;
    });
    afterAll(async () => {
      await new Promise((resolve) => server.close(resolve));
    });

    it('E2/E3/X3: replays with Idempotent-Replayed and answers 409 with Retry-After over the wire', async () => {
      const http = graphqlClient(fetch, url);
      const key = randomUUID();
      const release = shop.hold();
      const first = http(order(), keyHeader(key));
      await vi.waitFor(() => expect(shop.calls.createOrder).toBe(1));
      const concurrent = await http(order(), keyHeader(key));
      release();
      await first;
      const replay = await http(order(), keyHeader(key));

      expect(concurrent.status).toBe(409);
      expect(concurrent.headers.get('retry-after')).toMatch(/^\d+$/);
      expect(replay.status).toBe(200);
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(shop.calls.createOrder).toBe(1);
    });
  });
});

describe.each(unreachableStores)(
  '@idem/envelop with GraphQL Yoga on a store that cannot reach its database ($name)',
  ({ open }) => {
    it('E5/X3: answers HTTP 503 with a Retry-After header and IDEMPOTENCY_STORE_UNAVAILABLE, and does not run the resolver', async () => {
      const unreachable = await open();
      try {
        const shop = createShop();
        const yoga = createYoga({
          schema: shop.schema,
          logging: false,
          plugins: [
            useYogaIdempotency({ store: unreachable.store, principal: () => 'alice', unavailableRetryAfter: 3 }),
          ],
        });
        const post = graphqlClient((url, init) => yoga.fetch(url, init));
        const refused = await post(order(), keyHeader(randomUUID()));

        expect(refused.status).toBe(503);
        expect(refused.headers.get('retry-after')).toBe('3');
        expect(refused.body.errors?.[0]?.extensions).toMatchObject({ code: 'IDEMPOTENCY_STORE_UNAVAILABLE' });
        expect(shop.calls.createOrder).toBeUndefined();
      } finally {
        await unreachable.close();
      }
    });
  },
);
