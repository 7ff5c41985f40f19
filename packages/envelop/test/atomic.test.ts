/**
 * Atomic mode through GraphQL Yoga over real HTTP on PostgreSQL (a fresh schema): resolvers
 * write through `idempotencyClaim(context).tx`, and the writes commit with the claim and the
 * stored result, or not at all — for the operation unit (header key) and the field unit
 * (argument key). On SQLite the option is refused: a GraphQL execution awaits, a
 * better-sqlite3 transaction cannot.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GraphQLError } from 'graphql';
import { createSchema, createYoga } from 'graphql-yoga';
import { sql } from 'drizzle-orm';
import { createDrizzleStore, migrate } from '@idem/drizzle';
import { CREATE_PAYMENTS, countPgPayments, payOnPostgres } from '../../drizzle/test/payments.ts';
import { openPostgresTarget, type PostgresTarget } from '../../drizzle/test/pg-target.ts';
import { openSqliteTarget } from '../../drizzle/test/sqlite-target.ts';
import { idempotencyClaim, useYogaIdempotency } from '../src/index.ts';
import { graphqlClient } from './fixtures/http.ts';

const typeDefs = /* GraphQL */ `
  type Query {
    ok: Boolean
  }
  type Payment {
    id: ID!
    amount: Int!
  }
  type Mutation {
    pay(id: ID!, amount: Int!, idempotencyKey: String): Payment
    declinedPay(id: ID!, amount: Int!, idempotencyKey: String): Payment
  }
`;

describe('@idem/envelop atomic mode through Yoga over HTTP on PostgreSQL', () => {
  let target: PostgresTarget;
  let server: Server;
  let post: ReturnType<typeof graphqlClient>;
  const calls = { pay: 0, declinedPay: 0 };
  const payments = () => countPgPayments(target.db);

  beforeAll(async () => {
    target = await openPostgresTarget({ schemaPrefix: 'idem_envelop_atomic' });
    await migrate(target.db);
    await target.db.execute(sql.raw(CREATE_PAYMENTS));
    const schema = createSchema({
      typeDefs,
      resolvers: {
        Mutation: {
          pay: async (_: unknown, { id, amount }: { id: string; amount: number }, context: object) => {
            calls.pay++;
            await payOnPostgres(idempotencyClaim(context)?.tx, id);
            return { id, amount };
          },
          declinedPay: async (_: unknown, { id }: { id: string }, context: object) => {
            calls.declinedPay++;
            await payOnPostgres(idempotencyClaim(context)?.tx, id);
            throw new GraphQLError('card declined', { extensions: { code: 'CARD_DECLINED' } });
          },
        },
      },
    });
    const yoga = createYoga({
      schema,
      logging: false,
      plugins: [useYogaIdempotency({ store: createDrizzleStore(target.db), principal: () => 'alice', atomic: true })],
    });
    server = createServer((request, response) => void yoga(request, response));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    post = graphqlClient(fetch, `http://127.0.0.1:${(server.address() as AddressInfo).port}/graphql`);
  });
  afterAll(async () => {
    server?.closeAllConnections();
    await new Promise((resolve) => server?.close(resolve));
    await target?.close();
  });

  it('E1, E2 (operation unit): the resolver’s write through idempotencyClaim(context).tx commits with the result; a retry replays it and the write count stays 1', async () => {
    const key = randomUUID();
    const before = await payments();
    const query = 'mutation { pay(id: "pay_gql_1", amount: 42) { id amount } }';
    const first = await post({ query }, { 'idempotency-key': key });
    expect(first.status).toBe(200);
    expect(first.body).toEqual({ data: { pay: { id: 'pay_gql_1', amount: 42 } } });
    expect(await payments()).toBe(before + 1);

    const replay = await post({ query }, { 'idempotency-key': key });
    expect(replay.body).toEqual({ ...first.body, extensions: { idempotency: { replayed: true } } });
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(calls.pay).toBe(1);
    expect(await payments()).toBe(before + 1);
  });

  it('E4 (operation unit): a resolver error rolls its write back; the result with its error is stored and replayed', async () => {
    const key = randomUUID();
    const before = await payments();
    const query = 'mutation { declinedPay(id: "pay_gql_declined", amount: 5) { id } }';
    const first = await post({ query }, { 'idempotency-key': key });
    expect(first.body).toMatchObject({
      data: { declinedPay: null },
      errors: [{ message: 'card declined', path: ['declinedPay'], extensions: { code: 'CARD_DECLINED' } }],
    });
    expect(await payments()).toBe(before);

    const replay = await post({ query }, { 'idempotency-key': key });
    expect(replay.body).toEqual({ ...first.body, extensions: { idempotency: { replayed: true } } });
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(calls.declinedPay).toBe(1);
    expect(await payments()).toBe(before);
  });

  it('E4 (operation unit): when one root field fails, the writes of the others are rolled back too, and data reports none of them', async () => {
    const key = randomUUID();
    const before = await payments();
    const query =
      'mutation { a: pay(id: "pay_gql_a", amount: 1) { id } b: declinedPay(id: "pay_gql_b", amount: 1) { id } }';
    const first = await post({ query }, { 'idempotency-key': key });
    expect(first.body).toMatchObject({ data: null, errors: [{ message: 'card declined', path: ['b'] }] });
    expect(await payments()).toBe(before);
    const replay = await post({ query }, { 'idempotency-key': key });
    expect(replay.body).toEqual({ ...first.body, extensions: { idempotency: { replayed: true } } });
  });

  it('E1, E4 (field unit): each keyed field is its own transaction; the failed one is rolled back and replayed, the other committed and replayed', async () => {
    const [payKey, declineKey] = [randomUUID(), randomUUID()];
    const before = await payments();
    const query = `mutation { a: pay(id: "pay_gql_field", amount: 3, idempotencyKey: "${payKey}") { id } b: declinedPay(id: "pay_gql_field_declined", amount: 3, idempotencyKey: "${declineKey}") { id } }`;
    const first = await post({ query });
    expect(first.body).toMatchObject({
      data: { a: { id: 'pay_gql_field' }, b: null },
      errors: [{ message: 'card declined', path: ['b'] }],
    });
    expect(await payments()).toBe(before + 1);

    const replay = await post({ query });
    expect(replay.body).toEqual({
      ...first.body,
      extensions: { idempotency: { replayed: true, replayedFields: ['a', 'b'] } },
    });
    expect(await payments()).toBe(before + 1);
  });
});

describe('@idem/envelop atomic mode on SQLite', () => {
  it('is refused on better-sqlite3 (no atomic mode) when the plugin is created, with an [idem] error pointing to the stores that have it', async () => {
    const sqlite = await openSqliteTarget();
    try {
      await migrate(sqlite.db);
      const store = createDrizzleStore(sqlite.db);
      expect(() => useYogaIdempotency({ store, principal: () => 'alice', atomic: true })).toThrow(
        /^\[idem\] useIdempotency: `atomic: true` needs a store with atomic mode \(its `transaction`: AtomicMode in @idem\/core\/store\), and this store has none: leave `atomic` off/,
      );
    } finally {
      await sqlite.close();
    }
  });
});

describe('@idem/envelop atomic mode with onFailure: resume (E8) through Yoga over HTTP on PostgreSQL', () => {
  let target: PostgresTarget;
  let server: Server;
  let post: ReturnType<typeof graphqlClient>;
  const runs = { reserve: 0, charge: 0 };
  const payments = () => countPgPayments(target.db);

  beforeAll(async () => {
    target = await openPostgresTarget({ schemaPrefix: 'idem_envelop_atomic_resume' });
    await migrate(target.db);
    await target.db.execute(sql.raw(CREATE_PAYMENTS));
    const schema = createSchema({
      typeDefs: /* GraphQL */ `
        type Query { ok: Boolean }
        type Payment { id: ID! attempt: Int! }
        type Mutation { pay(id: ID!): Payment }
      `,
      resolvers: {
        Mutation: {
          pay: async (_: unknown, { id }: { id: string }, context: object) => {
            const claim = idempotencyClaim(context)!;
            await claim.step('reserve', async () => {
              runs.reserve++;
              await payOnPostgres(claim.tx, `${id}-reserved`);
            });
            await claim.step('charge', async () => {
              runs.charge++;
              await payOnPostgres(claim.tx, `${id}-charged`);
              if (runs.charge === 1) throw new Error('provider timeout');
            });
            return { id, attempt: claim.attempt };
          },
        },
      },
    });
    const yoga = createYoga({
      schema,
      logging: false,
      plugins: [
        useYogaIdempotency({
          store: createDrizzleStore(target.db),
          principal: () => 'alice',
          atomic: true,
          onFailure: 'resume',
        }),
      ],
    });
    server = createServer((request, response) => void yoga(request, response));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    post = graphqlClient(fetch, `http://127.0.0.1:${(server.address() as AddressInfo).port}/graphql`);
  });
  afterAll(async () => {
    server?.closeAllConnections();
    await new Promise((resolve) => server?.close(resolve));
    await target?.close();
  });

  it('E8: a failure after a step keeps the step’s write (its recovery point) and rolls back the rest; the retry skips the step and completes; a later retry replays', async () => {
    const headers = { 'idempotency-key': randomUUID() };
    const query = { query: 'mutation { pay(id: "p1") { id attempt } }' };

    const first = await post(query, headers);
    expect(first.headers.get('idempotent-resumable')).toBe('true');
    expect(first.body.data).toEqual({ pay: null });
    expect(await payments()).toBe(1); // the reservation, committed with its step; the failed charge rolled back

    const retry = await post(query, headers);
    expect(retry.body).toEqual({ data: { pay: { id: 'p1', attempt: 2 } } });
    expect(await payments()).toBe(2);

    const again = await post(query, headers);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.body.data).toEqual(retry.body.data);
    expect(runs).toEqual({ reserve: 1, charge: 2 });
    expect(await payments()).toBe(2);
  });
});
