/**
 * Black-box (E8): mutations with `onFailure: 'resume'` through GraphQL Yoga over real HTTP on
 * 127.0.0.1 (MemoryStore), and the three GraphQL clients against it: `createIdempotentFetch`,
 * Apollo Client's `idempotencyLink`, urql's `idempotencyExchange`. A payment is two steps,
 * `reserve` then `charge`; the provider fails the first charge of each step key (a timeout, an
 * unexpected error), succeeds on the next. Side effects are counted.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSchema, createYoga } from 'graphql-yoga';
import { GraphQLError } from 'graphql';
import { ApolloClient, ApolloLink, HttpLink, InMemoryCache, gql } from '@apollo/client';
import { Client, fetchExchange } from '@urql/core';
import {
  createPolicyDocument,
  MemoryStore,
  sharedPrincipal,
  type IdempotencyEvent,
  type IdempotencyStore,
} from '@idem/core';
import { finalFailure, idempotencyClaim, useYogaIdempotency } from '@idem/envelop';
import { createIdempotentFetch, type RetryNotice } from '@idem/envelop/client';
import { idempotencyLink } from '@idem/envelop/apollo';
import { idempotencyExchange } from '@idem/envelop/urql';
import { graphqlClient } from './fixtures/http.ts';
import { storeTargets } from './fixtures/stores.ts';

function createPayments(store: IdempotencyStore = new MemoryStore()) {
  const counts = { reservations: 0, chargeAttempts: 0, charges: 0, declines: 0, frauds: 0, outages: 0 };
  const chargeAttempts = new Map<string, number>();
  /** E8: a provider that times out on the first charge of each step key. */
  async function pay(context: object, amount: number) {
    const claim = idempotencyClaim(context)!;
    const reservation = await claim.step('reserve', (stepKey) => {
      counts.reservations += 1;
      return `res_${stepKey.slice(-6)}`;
    });
    const charge = await claim.step('charge', (stepKey) => {
      counts.chargeAttempts += 1;
      const attempt = (chargeAttempts.get(stepKey) ?? 0) + 1;
      chargeAttempts.set(stepKey, attempt);
      if (attempt === 1) throw new Error('provider timeout');
      counts.charges += 1;
      return `ch_${stepKey.slice(-6)}`;
    });
    return { id: charge, reservation, amount, attempt: claim.attempt };
  }
  const schema = createSchema({
    typeDefs: /* GraphQL */ `
      type Query { ok: Boolean! }
      type Payment { id: ID! reservation: String! amount: Int! attempt: Int! }
      type Mutation {
        pay(amount: Int!, idempotencyKey: String): Payment
        payV1(amount: Int!): Payment
        decline(amount: Int!): Payment
        fraud(amount: Int!): Payment
        outage(amount: Int!): Payment
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
        outage: () => {
          counts.outages += 1;
          throw new GraphQLError('provider unavailable', {
            extensions: { code: 'PROVIDER_UNAVAILABLE', http: { status: 503 } },
          });
        },
      },
    },
  });
  const resume = { onFailure: 'resume' as const };
  const completed: Array<Extract<IdempotencyEvent, { type: 'completed' }>> = [];
  const plugin = useYogaIdempotency({
    store,
    onEvent: (event) => void (event.type === 'completed' && completed.push(event)),
    principal: sharedPrincipal,
    required: false,
    policy: { 'Mutation.pay': resume, 'Mutation.decline': resume, 'Mutation.fraud': resume, 'Mutation.outage': resume },
  });
  const yoga = createYoga({ schema, logging: false, batching: true, plugins: [plugin] });
  const policy = () =>
    createPolicyDocument({
      documentationUrl: '/idempotency',
      endpoints: plugin.describeEndpoints(yoga.getEnveloped().schema),
    });
  const server = createServer((req, res) => {
    if (req.url === '/idempotency')
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(policy()));
    else void yoga(req, res);
  });
  return { server, yoga, plugin, counts, completed };
}

const PAY = 'mutation Pay($amount: Int!) { pay(amount: $amount) { id reservation amount attempt } }';
const pay = (amount: number) => ({ query: PAY, variables: { amount } });
const field = (name: string) => ({ query: `mutation { ${name}(amount: 1) { id } }` });
const keyHeader = (key = randomUUID()) => ({ 'idempotency-key': `"${key}"` });

/** The payments server on 127.0.0.1 over `store`, for the duration of a describe block. */
function serve(open: () => Promise<{ store: IdempotencyStore; close(): Promise<void> }>) {
  const running = {} as {
    payments: ReturnType<typeof createPayments>;
    url: string;
    post: ReturnType<typeof graphqlClient>;
  };
  let server: Server;
  let close: () => Promise<void>;
  beforeAll(async () => {
    const opened = await open();
    close = opened.close;
    running.payments = createPayments(opened.store);
    server = running.payments.server;
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    running.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    running.post = graphqlClient((input, init) => fetch(input, init), `${running.url}/graphql`);
  });
  afterAll(async () => {
    server?.closeAllConnections();
    await new Promise((done) => server?.close(done));
    await close?.();
  });
  return running;
}

describe.each(storeTargets)('@idem/envelop with onFailure: resume (E8), GraphQL Yoga over HTTP on $name', (target) => {
  const running = serve(() => target.open());
  let payments: ReturnType<typeof createPayments>;
  let post: ReturnType<typeof graphqlClient>;
  beforeAll(() => {
    ({ payments, post } = running);
  });

  describe('the server', () => {
    it('E8: a failure after the start is marked resumable (header and extensions); the retry completes it, skipping the step done; a later retry replays', async () => {
      const headers = keyHeader();
      const before = { ...payments.counts };

      const first = await post(pay(14), headers);
      expect(first.headers.get('idempotent-resumable')).toBe('true');
      expect(first.headers.get('idempotent-replayed')).toBeNull();
      expect(payments.completed.at(-1)).toMatchObject({ status: 500, outcomeKind: 'error', resumable: true });
      expect(first.body.data).toEqual({ pay: null });
      expect(first.body.extensions).toEqual({ idempotency: { replayed: false, resumable: true } });

      const retry = await post(pay(14), headers);
      expect(retry.headers.get('idempotent-resumable')).toBeNull();
      expect(retry.headers.get('idempotent-replayed')).toBeNull();
      expect(retry.body).toEqual({ data: { pay: expect.objectContaining({ amount: 14, attempt: 2 }) } });

      const again = await post(pay(14), headers);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(again.headers.get('idempotent-resumable')).toBeNull();
      expect(again.body.data).toEqual(retry.body.data);

      expect(payments.counts.reservations - before.reservations).toBe(1);
      expect(payments.counts.charges - before.charges).toBe(1);
      expect(payments.counts.chargeAttempts - before.chargeAttempts).toBe(2);
    });

    it('E8/F3: other variables on a resumable key are refused with 422 and run nothing', async () => {
      const headers = keyHeader();
      expect((await post(pay(14), headers)).headers.get('idempotent-resumable')).toBe('true');
      const reservations = payments.counts.reservations;
      const other = await post(pay(15), headers);
      expect(other.status).toBe(422);
      expect(other.body.errors[0].extensions.code).toBe('IDEMPOTENCY_KEY_REUSED');
      expect(payments.counts.reservations).toBe(reservations);
    });

    it.each([
      ['decline', 'a GraphQLError the resolver throws on purpose', 'declines'],
      ['fraud', 'an unexpected error thrown as finalFailure(error)', 'frauds'],
    ] as const)(
      'E8/E4: under resume, %s (%s) is final: stored, replayed, never marked resumable',
      async (name, _what, count) => {
        const headers = keyHeader();
        const before = payments.counts[count];
        const first = await post(field(name), headers);
        expect(first.headers.get('idempotent-resumable')).toBeNull();
        expect(first.body.errors).toHaveLength(1);
        expect(first.body.extensions).toBeUndefined();

        const replay = await post(field(name), headers);
        expect(replay.headers.get('idempotent-replayed')).toBe('true');
        expect(replay.body.errors).toEqual(first.body.errors);
        expect(payments.counts[count] - before).toBe(1);
        // Stored as under 'replay': the result, 200, carrying its errors.
        expect(payments.completed.at(-1)).toMatchObject({ status: 200, outcomeKind: 'success', withErrors: true });
      },
    );

    it('E8: a GraphQLError with extensions.http.status 503 is a server failure: resumable, and run again on retry', async () => {
      const headers = keyHeader();
      const before = payments.counts.outages;
      const first = await post(field('outage'), headers);
      expect(first.headers.get('idempotent-resumable')).toBe('true');
      const retry = await post(field('outage'), headers);
      expect(retry.headers.get('idempotent-replayed')).toBeNull();
      expect(payments.counts.outages - before).toBe(2);
    });

    it('E4: a mutation that replays its failures is unchanged: stored and replayed, no resumable marker', async () => {
      const headers = keyHeader();
      const attempts = payments.counts.chargeAttempts;
      const query = { query: 'mutation { payV1(amount: 14) { id } }' };
      const first = await post(query, headers);
      expect(first.headers.get('idempotent-resumable')).toBeNull();
      expect(first.body.extensions).toBeUndefined();
      const replay = await post(query, headers);
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(replay.body.errors).toEqual(first.body.errors);
      expect(payments.counts.chargeAttempts - attempts).toBe(1);
    });

    it('E8: argument keys (the field unit) list the resumable fields in extensions.idempotency.resumableFields', async () => {
      const key = randomUUID();
      const query = {
        query: 'mutation($key: String) { first: pay(amount: 7, idempotencyKey: $key) { amount attempt } }',
        variables: { key },
      };
      const first = await post(query);
      expect(first.headers.get('idempotent-resumable')).toBe('true');
      expect(first.body.extensions).toEqual({
        idempotency: { replayed: false, resumable: true, resumableFields: ['first'] },
      });
      const retry = await post(query);
      expect(retry.body).toEqual({ data: { first: { amount: 7, attempt: 2 } } });
    });

    it('E8: a header key over a resume mutation and a replay one is one unit that replays its failures (never runs the replay one twice)', async () => {
      const headers = keyHeader();
      const attempts = payments.counts.chargeAttempts;
      const query = { query: 'mutation { a: pay(amount: 31) { id } b: payV1(amount: 31) { id } }' };
      const first = await post(query, headers);
      expect(first.headers.get('idempotent-resumable')).toBeNull();
      expect(first.body.extensions).toBeUndefined();
      const replay = await post(query, headers);
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(replay.body.errors).toEqual(first.body.errors);
      expect(payments.counts.chargeAttempts - attempts).toBe(2);
    });

    it('E8: in a Yoga batch each operation carries its own extensions.idempotency.resumable, and no header speaks for the batch', async () => {
      const operation = (key: string) => ({
        query: 'mutation($key: String) { pay(amount: 41, idempotencyKey: $key) { attempt } }',
        variables: { key },
      });
      const batch = [operation(randomUUID()), operation(randomUUID())];
      const first = await post(batch);
      expect(first.headers.get('idempotent-resumable')).toBeNull();
      expect(first.body.map((result: { extensions?: unknown }) => result.extensions)).toEqual([
        { idempotency: { replayed: false, resumable: true, resumableFields: ['pay'] } },
        { idempotency: { replayed: false, resumable: true, resumableFields: ['pay'] } },
      ]);
      const retry = await post(batch);
      expect(retry.body).toEqual([{ data: { pay: { attempt: 2 } } }, { data: { pay: { attempt: 2 } } }]);
    });

    it('R4: describeEndpoints publishes onFailure per mutation, and resume keeps keys 30 days by default', () => {
      const endpoints = payments.plugin.describeEndpoints(payments.yoga.getEnveloped().schema);
      const of = (operation: string) => endpoints.find((endpoint) => endpoint.operation === operation);
      expect(of('Mutation.pay')).toMatchObject({ onFailure: 'resume', retentionMs: 30 * 86_400_000 });
      expect(of('Mutation.payV1')).toMatchObject({ onFailure: 'replay', retentionMs: 86_400_000 });
    });
  });
});

describe('the GraphQL clients retry a resumable failure with the same key (E8), against Yoga on MemoryStore', () => {
  const running = serve(async () => ({ store: new MemoryStore(), close: async () => {} }));
  let payments: ReturnType<typeof createPayments>;
  let url: string;
  beforeAll(() => {
    ({ payments, url } = running);
  });
  it('createIdempotentFetch: retries the resumable answer with its key and returns the completed result', async () => {
    const sent: Array<{ key: string | null; status: number }> = [];
    const notices: RetryNotice[] = [];
    const idempotentFetch = createIdempotentFetch({
      policyUrl: `${url}/idempotency`,
      initialDelayMs: 1,
      onRetry: (notice) => notices.push(notice),
      fetch: async (input, init) => {
        const response = await fetch(input, init);
        if (!String(input).endsWith('/idempotency'))
          sent.push({ key: new Headers(init?.headers).get('idempotency-key'), status: response.status });
        return response;
      },
    });
    const client = graphqlClient(idempotentFetch, `${url}/graphql`);
    const answer = await client(pay(21));
    expect(answer.body.data.pay).toMatchObject({ amount: 21, attempt: 2 });
    expect(notices.map((notice) => notice.reason)).toEqual(['resumable']);
    expect(sent).toHaveLength(2);
    expect(sent[1]!.key).toBe(sent[0]!.key);
  });

  it('createIdempotentFetch: a final failure is returned as it is, never retried', async () => {
    const notices: RetryNotice[] = [];
    const idempotentFetch = createIdempotentFetch({
      policyUrl: `${url}/idempotency`,
      onRetry: (notice) => notices.push(notice),
    });
    const before = payments.counts.declines;
    const answer = await graphqlClient(idempotentFetch, `${url}/graphql`)(field('decline'));
    expect(answer.body.errors[0].message).toBe('card declined');
    expect(notices).toEqual([]);
    expect(payments.counts.declines - before).toBe(1);
  });

  it('Apollo Client idempotencyLink: retries the resumable result with its key; the mutation resolves with the completed payment', async () => {
    const keys: Array<string | null> = [];
    const notices: RetryNotice[] = [];
    const client = new ApolloClient({
      cache: new InMemoryCache(),
      link: ApolloLink.from([
        idempotencyLink({ policyUrl: `${url}/idempotency`, initialDelayMs: 1, onRetry: (n) => notices.push(n) }),
        new HttpLink({
          uri: `${url}/graphql`,
          fetch: (input, init) => {
            keys.push(new Headers(init?.headers).get('idempotency-key'));
            return fetch(input, init);
          },
        }),
      ]),
    });
    const { data } = await client.mutate<{ pay: { amount: number; attempt: number } }>({
      mutation: gql(PAY),
      variables: { amount: 22 },
    });
    expect(data?.pay).toMatchObject({ amount: 22, attempt: 2 });
    expect(notices.map((notice) => notice.reason)).toEqual(['resumable']);
    expect(keys).toHaveLength(2);
    expect(keys[1]).toBe(keys[0]);
  });

  it('Apollo Client idempotencyLink: a final failure is the answer, never retried', async () => {
    const notices: RetryNotice[] = [];
    const client = new ApolloClient({
      cache: new InMemoryCache(),
      link: ApolloLink.from([
        idempotencyLink({ policyUrl: `${url}/idempotency`, onRetry: (n) => notices.push(n) }),
        new HttpLink({ uri: `${url}/graphql` }),
      ]),
    });
    const before = payments.counts.declines;
    await expect(client.mutate({ mutation: gql('mutation { decline(amount: 1) { id } }') })).rejects.toThrow(
      'card declined',
    );
    expect(notices).toEqual([]);
    expect(payments.counts.declines - before).toBe(1);
  });

  it('urql idempotencyExchange: retries the resumable answer with its key; the result is the completed payment', async () => {
    const keys: Array<string | null> = [];
    const notices: RetryNotice[] = [];
    const client = new Client({
      url: `${url}/graphql`,
      exchanges: [
        idempotencyExchange({ policyUrl: `${url}/idempotency`, initialDelayMs: 1, onRetry: (n) => notices.push(n) }),
        fetchExchange,
      ],
      fetch: (input, init) => {
        keys.push(new Headers(init?.headers).get('idempotency-key'));
        return fetch(input, init);
      },
    });
    const result = await client.mutation(PAY, { amount: 23 }).toPromise();
    expect(result.error).toBeUndefined();
    expect(result.data?.pay).toMatchObject({ amount: 23, attempt: 2 });
    expect(notices.map((notice) => notice.reason)).toEqual(['resumable']);
    expect(keys).toHaveLength(2);
    expect(keys[1]).toBe(keys[0]);
  });
});
