/**
 * Black-box (E8): mutations with `onFailure: 'resume'` through Apollo Server 5
 * (`startStandaloneServer`, real HTTP on 127.0.0.1), once per store. A payment is two steps,
 * `reserve` then `charge`, under the resolver's claim; the provider fails the first charge of each
 * step key, succeeds on the next. Side effects are counted.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApolloServer } from '@apollo/server';
import { startStandaloneServer } from '@apollo/server/standalone';
import { GraphQLError } from 'graphql';
import { createSchema } from 'graphql-yoga';
import { sharedPrincipal } from '@idem/core';
import { finalFailure, idempotencyClaim, useApolloIdempotency } from '../src/index.ts';
import { graphqlClient } from '../../envelop/test/fixtures/http.ts';
import { storeTargets } from '../../envelop/test/fixtures/stores.ts';

const counts = { reservations: 0, chargeAttempts: 0, charges: 0, declines: 0, frauds: 0 };
const attempts = new Map<string, number>();

const schema = createSchema({
  typeDefs: /* GraphQL */ `
    type Query { ok: Boolean! }
    type Payment { id: ID! amount: Int! attempt: Int! }
    type Mutation {
      pay(amount: Int!): Payment
      payV1(amount: Int!): Payment
      decline(amount: Int!): Payment
      fraud(amount: Int!): Payment
    }
  `,
  resolvers: {
    Query: { ok: () => true },
    Mutation: {
      pay: (_: unknown, { amount }: { amount: number }, context: object) => pay(context, amount),
      payV1: (_: unknown, { amount }: { amount: number }, context: object) => pay(context, amount),
      decline: () => {
        counts.declines += 1;
        throw new GraphQLError('card declined', { extensions: { code: 'CARD_DECLINED' } });
      },
      fraud: () => {
        counts.frauds += 1;
        throw finalFailure(new Error('flagged as fraud'));
      },
    },
  },
});

async function pay(context: object, amount: number) {
  const claim = idempotencyClaim(context)!;
  await claim.step('reserve', () => {
    counts.reservations += 1;
  });
  const id = await claim.step('charge', (stepKey) => {
    counts.chargeAttempts += 1;
    const attempt = (attempts.get(stepKey) ?? 0) + 1;
    attempts.set(stepKey, attempt);
    if (attempt === 1) throw new Error('provider timeout');
    counts.charges += 1;
    return `ch_${stepKey.slice(-6)}`;
  });
  return { id, amount, attempt: claim.attempt };
}

const keyHeader = () => ({ 'idempotency-key': `"${randomUUID()}"` });
const mutation = (field: string, amount = 14) => ({
  query: `mutation { ${field}(amount: ${amount}) { id amount attempt } }`,
});

describe.each(storeTargets)(
  '@idem/apollo-server with onFailure: resume (E8), Apollo Server over HTTP on $name',
  (target) => {
    let apollo: ApolloServer;
    let post: ReturnType<typeof graphqlClient>;
    let plugin: ReturnType<typeof useApolloIdempotency>;
    let close: () => Promise<void>;
    const resume = { onFailure: 'resume' as const };

    beforeAll(async () => {
      const opened = await target.open();
      close = opened.close;
      plugin = useApolloIdempotency({
        store: opened.store,
        principal: sharedPrincipal,
        required: false,
        policy: { 'Mutation.pay': resume, 'Mutation.decline': resume, 'Mutation.fraud': resume },
      });
      apollo = new ApolloServer({ schema, plugins: [plugin] });
      const { url } = await startStandaloneServer(apollo, { listen: { port: 0, host: '127.0.0.1' } });
      post = graphqlClient((input, init) => fetch(input, init), url);
    });
    afterAll(async () => {
      await apollo?.stop();
      await close?.();
    });

    it('E8: a failure after the start is marked resumable (header and extensions); the retry completes it, skipping the step done; a later retry replays', async () => {
      const headers = keyHeader();
      const before = { ...counts };
      const first = await post(mutation('pay'), headers);
      expect(first.headers.get('idempotent-resumable')).toBe('true');
      expect(first.body.extensions).toEqual({ idempotency: { replayed: false, resumable: true } });
      expect(first.body.data).toEqual({ pay: null });

      const retry = await post(mutation('pay'), headers);
      expect(retry.headers.get('idempotent-resumable')).toBeNull();
      expect(retry.body.data.pay).toMatchObject({ amount: 14, attempt: 2 });

      const again = await post(mutation('pay'), headers);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(again.body.data).toEqual(retry.body.data);
      expect(counts.reservations - before.reservations).toBe(1);
      expect(counts.charges - before.charges).toBe(1);
    });

    it('E8/F3: another payload on a resumable key is 422, nothing runs', async () => {
      const headers = keyHeader();
      expect((await post(mutation('pay', 14), headers)).headers.get('idempotent-resumable')).toBe('true');
      const reservations = counts.reservations;
      const other = await post(mutation('pay', 15), headers);
      expect(other.status).toBe(422);
      expect(counts.reservations).toBe(reservations);
    });

    it.each([
      ['decline', 'declines'],
      ['fraud', 'frauds'],
    ] as const)('E8/E4: under resume, %s is final: stored, replayed, never marked resumable', async (field, count) => {
      const headers = keyHeader();
      const before = counts[count];
      const first = await post(mutation(field), headers);
      expect(first.headers.get('idempotent-resumable')).toBeNull();
      const replay = await post(mutation(field), headers);
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(replay.body.errors).toEqual(first.body.errors);
      expect(counts[count] - before).toBe(1);
    });

    it('E4: a mutation that replays its failures is unchanged: no resumable marker', async () => {
      const headers = keyHeader();
      const first = await post(mutation('payV1'), headers);
      expect(first.headers.get('idempotent-resumable')).toBeNull();
      expect((await post(mutation('payV1'), headers)).headers.get('idempotent-replayed')).toBe('true');
    });

    it('R4: describeEndpoints publishes onFailure', () => {
      const endpoints = plugin.describeEndpoints(schema);
      expect(endpoints.find((endpoint) => endpoint.operation === 'Mutation.pay')).toMatchObject({
        onFailure: 'resume',
      });
      expect(endpoints.find((endpoint) => endpoint.operation === 'Mutation.payV1')).toMatchObject({
        onFailure: 'replay',
      });
    });
  },
);
