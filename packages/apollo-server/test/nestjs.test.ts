/**
 * NestJS GraphQL on its default driver, `ApolloDriver` (@nestjs/apollo over Apollo Server 5), with
 * `useApolloIdempotency` in `plugins`: a small schema-first app, over real HTTP and SQLite.
 * Decorators are applied as functions, so the test needs no decorator transform.
 */
import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Module, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { GraphQLModule } from '@nestjs/graphql';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import type { Request } from 'express';
import { idempotencyClaim } from '@idem/core';
import { idempotentDirectiveTypeDefs, useApolloIdempotency } from '../src/index.ts';
import { graphqlClient } from '../../envelop/test/fixtures/http.ts';
import { storeTargets, type OpenStore } from '../../envelop/test/fixtures/stores.ts';

const typeDefs = /* GraphQL */ `
  type Payment {
    id: ID!
    amount: Int!
    claimed: Boolean!
  }
  type Query {
    payments: Int!
  }
  type Mutation {
    createPayment(amount: Int!, idempotencyKey: String): Payment!
  }
`;

const sqlite = storeTargets.find((target) => target.name === 'SQLite')!;

describe('@idem/apollo-server on NestJS ApolloDriver (SQLite)', () => {
  let opened: OpenStore;
  let app: INestApplication;
  let post: ReturnType<typeof graphqlClient>;
  let calls = 0;

  beforeAll(async () => {
    opened = await sqlite.open();
    class AppModule {}
    Module({
      imports: [
        GraphQLModule.forRoot<ApolloDriverConfig>({
          driver: ApolloDriver,
          typeDefs: [idempotentDirectiveTypeDefs, typeDefs],
          resolvers: {
            Query: { payments: () => calls },
            Mutation: {
              createPayment: (_: unknown, { amount }: { amount: number }, context: object) => {
                calls++;
                return { id: `pay_${calls}`, amount, claimed: idempotencyClaim(context) !== undefined };
              },
            },
          },
          context: ({ req }: { req: Request }) => ({ user: String(req.headers['x-user'] ?? 'anonymous') }),
          plugins: [
            useApolloIdempotency<{ user: string }>({ store: opened.store, principal: (context) => context.user }),
          ],
        }),
      ],
    })(AppModule);
    app = await NestFactory.create(AppModule, { logger: false });
    await app.listen(0, '127.0.0.1');
    post = graphqlClient(fetch, `${(await app.getUrl()).replace('[::1]', '127.0.0.1')}/graphql`);
  });
  afterAll(async () => {
    await app?.close();
    await opened?.close();
  });

  it('E1, E2: a retried mutation with the same header key replays the stored payment and does not run the resolver again', async () => {
    const key = randomUUID();
    const mutation = { query: 'mutation { createPayment(amount: 4200) { id amount claimed } }' };
    const headers = { 'idempotency-key': `"${key}"`, 'x-user': 'alice' };
    const first = await post(mutation, headers);
    expect(first.status).toBe(200);
    expect(first.body.data.createPayment).toMatchObject({ amount: 4200, claimed: true });
    const second = await post(mutation, headers);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(second.body.data).toEqual(first.body.data);
    expect(calls).toBe(1);
  });

  it('K2, X3: a mutation without a key is refused with 400 IDEMPOTENCY_KEY_MISSING through the Nest app', async () => {
    const before = calls;
    const missing = await post({ query: 'mutation { createPayment(amount: 1) { id } }' }, { 'x-user': 'alice' });
    expect(missing.status).toBe(400);
    expect(missing.body.errors[0].extensions.code).toBe('IDEMPOTENCY_KEY_MISSING');
    expect(calls).toBe(before);
  });

  it('K4: an argument key is its own record, replayed', async () => {
    const key = randomUUID();
    const query = `mutation { createPayment(amount: 7, idempotencyKey: "${key}") { id } }`;
    const first = await post({ query }, { 'x-user': 'bob' });
    const second = await post({ query }, { 'x-user': 'bob' });
    expect(second.body.data).toEqual(first.body.data);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
  });
});
