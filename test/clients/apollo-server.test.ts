/**
 * The GraphQL clients against Apollo Server (@idem/apollo-server at the example's
 * `/apollo/graphql`), through the proxy that lets the server charge and then loses its answers:
 * Apollo Client's `idempotencyLink`, urql's `idempotencyExchange` and `createIdempotentFetch` keep
 * one key through the lost answers, and the mutation is charged once (SPEC E2, K1).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApolloClient, ApolloLink, HttpLink, InMemoryCache, gql } from '@apollo/client';
import { Client, fetchExchange } from '@urql/core';
import { idempotencyLink } from '@idem/envelop/apollo';
import { createIdempotentFetch } from '@idem/envelop/client';
import { idempotencyExchange } from '@idem/envelop/urql';
import { keysOf, PAY, startPayments, type Payment, type PaymentsUnderTest } from './support/payments.ts';

const retrying = { maxAttempts: 3, initialDelayMs: 10 };

describe('the GraphQL clients against Apollo Server (/apollo/graphql) in the payments example', () => {
  let payments: PaymentsUnderTest;
  beforeAll(async () => {
    payments = await startPayments({ IDEM_TTL: '30m' }, { graphqlPath: '/apollo/graphql' });
  });
  afterAll(() => payments?.close());

  /** The proxied requests since `from`: one key on all of them, the first charged and lost, the last a replay that arrived. */
  function expectOneKeyOneCharge(from: number, lost: number) {
    const requests = payments.graphqlRequests(from);
    expect(requests.map((request) => [request.dropped, request.replayed])).toEqual([
      [true, false],
      ...Array.from({ length: lost - 1 }, () => [true, true]),
      [false, true],
    ]);
    expect(keysOf(requests)).toHaveLength(1);
    expect(keysOf(requests)[0]).toMatch(/^"[0-9a-f-]{36}"$/);
  }

  it('E2, K1: Apollo Client with idempotencyLink — two lost answers, one key, one charge, the replay reaches the client', async () => {
    const client = new ApolloClient({
      cache: new InMemoryCache(),
      link: ApolloLink.from([
        idempotencyLink({ policyUrl: payments.policyUrl, ...retrying }),
        new HttpLink({ uri: payments.graphqlUrl }),
      ]),
    });
    const from = payments.proxy.requests.length;
    payments.proxy.dropNextResponses(2);
    const { data } = await client.mutate<{ createPayment: Payment }>({
      mutation: gql(PAY),
      variables: { input: { amount: 6101, currency: 'EUR' } },
    });
    expectOneKeyOneCharge(from, 2);
    const charges = await payments.charges(6101);
    expect(charges).toHaveLength(1);
    expect(data?.createPayment.id).toBe(charges[0]!.id);
  });

  it('E2, K1: urql with idempotencyExchange — two lost answers, one key, one charge', async () => {
    const client = new Client({
      url: payments.graphqlUrl,
      exchanges: [idempotencyExchange({ policyUrl: payments.policyUrl, ...retrying }), fetchExchange],
    });
    const from = payments.proxy.requests.length;
    payments.proxy.dropNextResponses(2);
    const result = await client
      .mutation<{ createPayment: Payment }>(PAY, { input: { amount: 6102, currency: 'EUR' } })
      .toPromise();
    expect(result.error).toBeUndefined();
    expectOneKeyOneCharge(from, 2);
    const charges = await payments.charges(6102);
    expect(charges).toHaveLength(1);
    expect(result.data?.createPayment.id).toBe(charges[0]!.id);
  });

  it('E2, K1: createIdempotentFetch — a lost answer, one key, one charge, Idempotent-Replayed on the answer', async () => {
    const fetchWithKeys = createIdempotentFetch({ policyUrl: payments.policyUrl, ...retrying });
    const from = payments.proxy.requests.length;
    payments.proxy.dropNextResponses(1);
    const response = await fetchWithKeys(payments.graphqlUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/graphql-response+json' },
      body: JSON.stringify({ query: PAY, variables: { input: { amount: 6103, currency: 'EUR' } } }),
    });
    expect(response.status).toBe(200);
    expect(response.headers.get('idempotent-replayed')).toBe('true');
    const body = (await response.json()) as { data: { createPayment: Payment } };
    expectOneKeyOneCharge(from, 1);
    const charges = await payments.charges(6103);
    expect(charges).toHaveLength(1);
    expect(body.data.createPayment.id).toBe(charges[0]!.id);
  });
});
