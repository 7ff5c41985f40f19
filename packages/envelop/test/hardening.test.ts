/**
 * Issue 14 (hardening), items 2, 4 and 8, black-box through GraphQL Yoga on every store
 * (memory, SQLite, PostgreSQL). A small bank schema whose resolvers count their calls, and a
 * bank that deduplicates charges by the downstream key the claim derives, as a payment
 * provider with idempotency keys does.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createSchema, createYoga } from 'graphql-yoga';
import { GraphQLError } from 'graphql';
import { notStarted, idempotencyClaim } from '@idem/core';
import { useYogaIdempotency } from '../src/index.ts';
import { graphqlClient } from './fixtures/http.ts';
import { storeTargets, type OpenStore } from './fixtures/stores.ts';

const typeDefs = /* GraphQL */ `
  type Query {
    charges: Int!
  }
  type Receipt {
    id: ID!
    amount: Int!
    currency: String!
    bankKey: String
    lines(first: Int!): [String!]!
  }
  type Mutation {
    "Non-null. amount <= 0: refused before anything happens (notStarted)."
    charge(amount: Int!, idempotencyKey: String): Receipt!
    "Nullable. amount <= 0: refused before anything happens; amount 13: charges, then fails."
    tryCharge(amount: Int!, idempotencyKey: String): Receipt
  }
`;

interface Bank {
  schema: ReturnType<typeof createSchema>;
  /** Resolver runs, by field and amount, e.g. `charge:100`. */
  calls: Record<string, number>;
  /** Charges the bank made, by downstream key. */
  charges: Map<string, { id: string; amount: number }>;
}

function createBank(): Bank {
  const calls: Record<string, number> = {};
  const charges = new Map<string, { id: string; amount: number }>();
  let sequence = 0;
  const pay = (field: string, amount: number, context: unknown) => {
    calls[`${field}:${amount}`] = (calls[`${field}:${amount}`] ?? 0) + 1;
    if (amount <= 0)
      throw notStarted(
        context,
        new GraphQLError('amount must be positive', { extensions: { code: 'BAD_USER_INPUT' } }),
      );
    const bankKey = idempotencyClaim(context)?.deriveKey('bank') ?? `unkeyed-${randomUUID()}`;
    // A known downstream key is answered with the earlier charge, not charged again.
    const charge = charges.get(bankKey) ?? { id: `rcpt-${++sequence}`, amount };
    charges.set(bankKey, charge);
    if (amount === 13) throw new Error('bank failed after charging');
    return { ...charge, currency: 'EUR', bankKey };
  };
  const schema = createSchema({
    typeDefs,
    resolvers: {
      Query: { charges: () => charges.size },
      Receipt: {
        lines: (receipt: { id: string }, { first }: { first: number }) =>
          Array.from({ length: first }, (_, index) => `${receipt.id}/${index}`),
      },
      Mutation: {
        charge: (_: unknown, { amount }: { amount: number }, context: unknown) => pay('charge', amount, context),
        tryCharge: (_: unknown, { amount }: { amount: number }, context: unknown) => pay('tryCharge', amount, context),
      },
    },
  });
  return { schema, calls, charges };
}

const keyHeader = (key: string) => ({ 'idempotency-key': `"${key}"`, 'x-user': 'alice' });

describe.each(storeTargets)('hardening (issue 14) over $name', (target) => {
  let opened: OpenStore;
  let bank: Bank;
  let post: ReturnType<typeof graphqlClient>;

  beforeAll(async () => {
    opened = await target.open();
  });
  afterAll(async () => {
    await opened?.close();
  });
  beforeEach(() => {
    bank = createBank();
    const yoga = createYoga({
      schema: bank.schema,
      logging: false,
      plugins: [
        useYogaIdempotency({
          store: opened.store,
          principal: ({ request }) => request.headers.get('x-user') ?? 'anonymous',
        }),
      ],
    });
    post = graphqlClient((url, init) => yoga.fetch(url, init));
  });

  describe('item 2: a header key over several root fields', () => {
    it('E4: each root field derives its own downstream key, so each is charged for its own amount', async () => {
      const key = randomUUID();
      const query =
        'mutation { a: charge(amount: 100) { id amount bankKey } b: charge(amount: 200) { id amount bankKey } }';
      const first = await post({ query }, keyHeader(key));
      const replay = await post({ query }, keyHeader(key));

      expect(first.status).toBe(200);
      const { a, b } = first.body.data;
      expect([a.amount, b.amount]).toEqual([100, 200]);
      expect(a.id).not.toBe(b.id);
      expect(a.bankKey).not.toBe(b.bankKey);
      expect([...bank.charges.values()].map((charge) => charge.amount)).toEqual([100, 200]);
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(replay.body.data).toEqual(first.body.data);
      expect(bank.calls).toEqual({ 'charge:100': 1, 'charge:200': 1 });
    });

    it('E4: the same field under two aliases with the same arguments is still two parts with two downstream keys', async () => {
      const key = randomUUID();
      const first = await post(
        { query: 'mutation { a: charge(amount: 100) { id bankKey } b: charge(amount: 100) { id bankKey } }' },
        keyHeader(key),
      );

      expect(first.body.data.a.bankKey).not.toBe(first.body.data.b.bankKey);
      expect(first.body.data.a.id).not.toBe(first.body.data.b.id);
      expect(bank.charges.size).toBe(2);
    });
  });

  describe('item 4: a later root field that did not start, after an earlier one ran', () => {
    it('E4: non-null fields: the unit is stored once the first field ran, and the retry replays instead of running it again', async () => {
      const key = randomUUID();
      const query = 'mutation { a: charge(amount: 100) { id amount } b: charge(amount: -1) { id amount } }';
      const first = await post({ query }, keyHeader(key));
      const retry = await post({ query }, keyHeader(key));

      expect(first.body.data).toBeNull();
      expect(first.body.errors).toEqual([expect.objectContaining({ message: 'amount must be positive', path: ['b'] })]);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(retry.body.errors).toEqual(first.body.errors);
      expect(bank.calls).toEqual({ 'charge:100': 1, 'charge:-1': 1 });
    });

    it('E4: nullable fields: a field that started and failed, then one that did not start: stored, replayed', async () => {
      const key = randomUUID();
      const query = 'mutation { a: tryCharge(amount: 13) { id } b: tryCharge(amount: -1) { id } }';
      const first = await post({ query }, keyHeader(key));
      const retry = await post({ query }, keyHeader(key));

      expect(first.body.data).toEqual({ a: null, b: null });
      expect(first.body.errors.map((error: { path: string[] }) => error.path)).toEqual([['a'], ['b']]);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(retry.body.data).toEqual(first.body.data);
      expect(bank.calls).toEqual({ 'tryCharge:13': 1, 'tryCharge:-1': 1 });
    });

    it('E4: __typename beside a field that did not start is no start: the claim is released', async () => {
      const key = randomUUID();
      const query = 'mutation { __typename a: charge(amount: -1) { id } }';
      const first = await post({ query }, keyHeader(key));
      const retry = await post({ query }, keyHeader(key));

      expect(first.body.data).toBeNull();
      expect(retry.headers.get('idempotent-replayed')).toBeNull();
      expect(bank.calls).toEqual({ 'charge:-1': 2 });
    });

    it('E4: when no field of the unit started, the claim is released and the retry runs again', async () => {
      const key = randomUUID();
      const query = 'mutation { a: tryCharge(amount: -1) { id } b: tryCharge(amount: -2) { id } }';
      const first = await post({ query }, keyHeader(key));
      const retry = await post({ query }, keyHeader(key));

      expect(first.body.data).toEqual({ a: null, b: null });
      expect(retry.headers.get('idempotent-replayed')).toBeNull();
      expect(bank.calls).toEqual({ 'tryCharge:-1': 2, 'tryCharge:-2': 2 });
    });
  });

  describe('item 8: a field key, and the variables its selection reads', () => {
    const SHAPED =
      'mutation ($v: Boolean!, $key: String) { tryCharge(amount: 5, idempotencyKey: $key) { id amount @include(if: $v) currency @skip(if: $v) } }';

    it('F1/F3: a retry whose @include/@skip variables select other fields is refused with 422, not replayed with the wrong shape', async () => {
      const key = randomUUID();
      const first = await post({ query: SHAPED, variables: { v: true, key } }, { 'x-user': 'alice' });
      const other = await post({ query: SHAPED, variables: { v: false, key } }, { 'x-user': 'alice' });

      expect(first.body.data.tryCharge).toEqual({ id: 'rcpt-1', amount: 5 });
      expect(other.status).toBe(422);
      expect(other.body.errors[0].extensions.code).toBe('IDEMPOTENCY_KEY_REUSED');
      expect(bank.calls).toEqual({ 'tryCharge:5': 1 });
    });

    it('F1: the same variables replay; the selection counts as written, so a literal condition in place of the variable is another request (422)', async () => {
      const key = randomUUID();
      const first = await post({ query: SHAPED, variables: { v: true, key } }, { 'x-user': 'alice' });
      const same = await post({ query: SHAPED, variables: { v: true, key } }, { 'x-user': 'alice' });
      const literal = await post(
        {
          query: `mutation { tryCharge(amount: 5, idempotencyKey: "${key}") { id amount @include(if: true) currency @skip(if: true) } }`,
        },
        { 'x-user': 'alice' },
      );

      expect(same.body.extensions.idempotency).toEqual({ replayed: true, replayedFields: ['tryCharge'] });
      expect(same.body.data).toEqual(first.body.data);
      expect(literal.status).toBe(422);
      expect(literal.body.errors[0].extensions.code).toBe('IDEMPOTENCY_KEY_REUSED');
      expect(bank.calls).toEqual({ 'tryCharge:5': 1 });
    });

    it('F1/F3: conditions on fragments, and arguments inside the selection, count too', async () => {
      const key = randomUUID();
      const query = `
        mutation ($v: Boolean!, $n: Int!) {
          tryCharge(amount: 5, idempotencyKey: "${key}") { id ...Money @include(if: $v) lines(first: $n) }
        }
        fragment Money on Receipt { amount currency }`;
      const first = await post({ query, variables: { v: true, n: 1 } }, { 'x-user': 'alice' });
      const withoutFragment = await post({ query, variables: { v: false, n: 1 } }, { 'x-user': 'alice' });
      const moreLines = await post({ query, variables: { v: true, n: 2 } }, { 'x-user': 'alice' });
      const replay = await post({ query, variables: { v: true, n: 1 } }, { 'x-user': 'alice' });

      expect(first.body.data.tryCharge).toEqual({ id: 'rcpt-1', amount: 5, currency: 'EUR', lines: ['rcpt-1/0'] });
      expect([withoutFragment.status, moreLines.status]).toEqual([422, 422]);
      expect(replay.body.data).toEqual(first.body.data);
      expect(bank.calls).toEqual({ 'tryCharge:5': 1 });
    });
  });
});
