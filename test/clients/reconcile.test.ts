/**
 * Reconcile instead of retry, in each client: tRPC's `idempotencyLink`, `createIdempotentFetch`,
 * Apollo's `idempotencyLink` and urql's `idempotencyExchange`, against the payments example over
 * HTTP. Past the retention window the client sends nothing again; with `reconcile: true` its
 * `RetentionWindowExceededError` carries what the server says became of the key, and
 * `reconcile(…, key, { operation })` asks it directly: executed (when, status, the value while
 * replayable), not found (an unknown key and another account's alike), or processing (R2, A1, S1).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTRPCClient, httpLink, type TRPCClientError } from '@trpc/client';
import { ApolloClient, ApolloLink, HttpLink, InMemoryCache, gql } from '@apollo/client';
import { cacheExchange, Client, fetchExchange } from '@urql/core';
import {
  idempotencyHeaders,
  idempotencyLink as trpcIdempotencyLink,
  reconcile as reconcileTRPC,
  RetentionWindowExceededError,
  type Reconciliation,
} from '@idem/trpc/client';
import { createIdempotentFetch, reconcile as reconcileOverFetch } from '@idem/envelop/client';
import { idempotencyLink as apolloIdempotencyLink, reconcile as reconcileApollo } from '@idem/envelop/apollo';
import { idempotencyExchange, reconcile as reconcileUrql } from '@idem/envelop/urql';
import type { PaymentsRouter } from '../../examples/payments/src/trpc.ts';
import { PAY, startPayments, type Payment, type PaymentsUnderTest } from './support/payments.ts';

const CAROL = { authorization: 'Bearer carol' };
/** A first attempt a day ago: any retry now is past the retention window. */
const longAgo = () => Date.now() - 24 * 3_600_000;

function executed<T>(answer: Reconciliation<T> | undefined) {
  expect(answer?.kind).toBe('executed');
  if (answer?.kind !== 'executed') throw new Error('not executed');
  return answer;
}

describe('reconcile instead of retry, against the payments example', () => {
  let payments: PaymentsUnderTest;
  beforeAll(async () => {
    payments = await startPayments({ IDEM_TTL: '30m', CHANNEL_DELAY_MS: '0' });
  });
  afterAll(() => payments?.close());

  describe('tRPC: idempotencyLink and reconcile(client, key)', () => {
    const client = (options: { reconcile?: boolean } = {}) =>
      createTRPCClient<PaymentsRouter>({
        links: [
          trpcIdempotencyLink<PaymentsRouter>({ retention: '30m', maxAttempts: 2, initialDelayMs: 5, ...options }),
          httpLink({ url: payments.trpcUrl, headers: ({ op }) => ({ ...idempotencyHeaders(op), ...CAROL }) }),
        ],
      });

    it('R2: a lost answer, then the same key past the window with reconcile: nothing sent again, the error carries the first charge', async () => {
      const trpc = client({ reconcile: true });
      payments.proxy.dropNextResponses(2);
      const lost = await trpc.payments.create.mutate({ amount: 3101, currency: 'EUR' }).catch((error) => error);
      const unresolved = (lost as TRPCClientError<PaymentsRouter>).cause as unknown as { key: string };
      const from = payments.proxy.requests.length;

      const late = await trpc.payments.create
        .mutate(
          { amount: 3101, currency: 'EUR' },
          { context: { idempotencyKey: unresolved.key, idempotencyFirstAttemptAt: longAgo() } },
        )
        .catch((error: unknown) => error);

      const refusal = (late as TRPCClientError<PaymentsRouter>).cause as RetentionWindowExceededError;
      expect(refusal).toBeInstanceOf(RetentionWindowExceededError);
      expect(refusal.attempts).toBe(0);
      const [charge] = await payments.charges(3101);
      const answer = executed(refusal.reconciliation);
      expect(answer).toMatchObject({
        key: unresolved.key,
        operation: 'payments.create',
        status: 200,
        outcomeKind: 'success',
        replayable: true,
        executions: 1,
        value: { id: charge!.id, amount: 3101, currency: 'EUR' },
      });
      expect(answer.at).toBeInstanceOf(Date);
      // One request after the refusal: the status query, with carol's Authorization and no key.
      expect(
        payments.proxy.requests.slice(from).map((request) => [request.path.split('?')[0], request.idempotencyKey]),
      ).toEqual([['/trpc/idempotency.status', undefined]]);
      expect(await payments.charges(3101)).toHaveLength(1);
    });

    it('R2: without reconcile the link only throws: no lookup, no request', async () => {
      const trpc = client();
      const from = payments.proxy.requests.length;
      const late = await trpc.payments.create
        .mutate({ amount: 3102, currency: 'EUR' }, { context: { idempotencyFirstAttemptAt: longAgo() } })
        .catch((error: unknown) => error);
      const refusal = (late as TRPCClientError<PaymentsRouter>).cause as RetentionWindowExceededError;
      expect(refusal).toBeInstanceOf(RetentionWindowExceededError);
      expect(refusal.reconciliation).toBeUndefined();
      expect(payments.proxy.requests.slice(from)).toEqual([]);
    });

    it("S1: reconcile(client, key) answers executed for carol's key, and not_found for an unknown key and for carol's key asked by dave", async () => {
      const trpc = client();
      const key = `order-${crypto.randomUUID()}`;
      const payment = await trpc.payments.create.mutate(
        { amount: 3103, currency: 'EUR' },
        { context: { idempotencyKey: key } },
      );
      expect(executed(await reconcileTRPC<Payment>(trpc, key, { operation: 'payments.create' })).value).toEqual(
        payment,
      );
      expect(await reconcileTRPC(trpc, `order-${crypto.randomUUID()}`, { operation: 'payments.create' })).toEqual({
        kind: 'not_found',
        key: expect.any(String),
        operation: 'payments.create',
      });
      const dave = createTRPCClient<PaymentsRouter>({
        links: [httpLink({ url: payments.trpcUrl, headers: () => ({ authorization: 'Bearer dave' }) })],
      });
      expect(await reconcileTRPC(dave, key, { operation: 'payments.create' })).toEqual({
        kind: 'not_found',
        key,
        operation: 'payments.create',
      });
      await expect(reconcileTRPC(trpc, key, { operation: 'payments.create', path: 'nowhere.status' })).rejects.toThrow(
        /the server has no procedure at nowhere\.status/,
      );
    });
  });

  describe('GraphQL: createIdempotentFetch and reconcile(url, key)', () => {
    const payRequest = (amount: number): RequestInit => ({
      method: 'POST',
      headers: { 'content-type': 'application/json', ...CAROL },
      body: JSON.stringify({ query: PAY, variables: { input: { amount, currency: 'EUR' } } }),
    });

    it('R2: a lost answer, then the same request past the window: nothing sent again, the error carries the stored result', async () => {
      let clock = Date.now();
      const idemFetch = createIdempotentFetch({ retention: '30m', maxAttempts: 1, reconcile: true, now: () => clock });
      payments.proxy.dropNextResponses(1);
      const lost = await idemFetch(payments.graphqlUrl, payRequest(3201)).catch((error: unknown) => error);
      const key = (lost as { key: string }).key;
      const from = payments.proxy.requests.length;

      // The caller sends the same request again, 31 minutes later: the retention has passed.
      clock += 31 * 60_000;
      const late = await idemFetch(payments.graphqlUrl, payRequest(3201)).catch((error: unknown) => error);

      expect(late).toBeInstanceOf(RetentionWindowExceededError);
      const [charge] = await payments.charges(3201);
      const answer = executed((late as RetentionWindowExceededError).reconciliation);
      expect(answer).toMatchObject({ key, operation: 'Mutation.createPayment', status: 200, replayable: true });
      expect(answer.value).toEqual({ data: { createPayment: { id: charge!.id, amount: 3201, currency: 'EUR' } } });
      expect(payments.graphqlRequests(from).map((request) => request.idempotencyKey)).toEqual([undefined]);
      expect(await payments.charges(3201)).toHaveLength(1);
    });

    it("S1: reconcile(url, key) with the caller's headers: executed for its own key, not_found for an unknown one and for another account", async () => {
      const key = `order-${crypto.randomUUID()}`;
      const init = payRequest(3202);
      const response = await fetch(payments.graphqlUrl, {
        ...init,
        headers: { ...init.headers, 'idempotency-key': key },
      });
      expect(response.status).toBe(200);
      const operation = 'Mutation.createPayment';
      expect(executed(await reconcileOverFetch(payments.graphqlUrl, key, { operation, headers: CAROL })).status).toBe(
        200,
      );
      const unknown = await reconcileOverFetch(payments.graphqlUrl, `order-${crypto.randomUUID()}`, {
        operation,
        headers: CAROL,
      });
      const foreign = await reconcileOverFetch(payments.graphqlUrl, key, {
        operation,
        headers: { authorization: 'Bearer dave' },
      });
      expect(unknown.kind).toBe('not_found');
      expect(foreign).toEqual({ kind: 'not_found', key, operation });
      await expect(reconcileOverFetch(payments.graphqlUrl, 'order 1', { operation, headers: CAROL })).rejects.toThrow(
        /Idempotency-Key may only contain visible ASCII/,
      );
    });
  });

  describe('Apollo Client 4: idempotencyLink and reconcile(client, key)', () => {
    const apollo = (options: { reconcile?: boolean; now?: () => number } = {}) =>
      new ApolloClient({
        cache: new InMemoryCache(),
        link: ApolloLink.from([
          apolloIdempotencyLink({ retention: '30m', maxAttempts: 1, ...options }),
          new HttpLink({ uri: payments.graphqlUrl, headers: CAROL }),
        ]),
      });

    it('R2: the same key past the window with reconcile: the query goes through the client, the error carries the stored result', async () => {
      const key = `order-${crypto.randomUUID()}`;
      await apollo().mutate({
        mutation: gql(PAY),
        variables: { input: { amount: 3301, currency: 'EUR' } },
        context: { idempotencyKey: key },
      });
      const from = payments.proxy.requests.length;
      const late = await apollo({ reconcile: true })
        .mutate({
          mutation: gql(PAY),
          variables: { input: { amount: 3301, currency: 'EUR' } },
          context: { idempotencyKey: key, idempotencyFirstAttemptAt: longAgo() },
        })
        .catch((error: unknown) => error);
      expect(late).toBeInstanceOf(RetentionWindowExceededError);
      const answer = executed((late as RetentionWindowExceededError).reconciliation);
      expect(answer).toMatchObject({ key, operation: 'Mutation.createPayment', status: 200 });
      expect(payments.graphqlRequests(from).map((request) => request.idempotencyKey)).toEqual([undefined]);
      expect(await payments.charges(3301)).toHaveLength(1);
      expect(
        (await reconcileApollo(apollo(), `order-${crypto.randomUUID()}`, { operation: 'Mutation.createPayment' })).kind,
      ).toBe('not_found');
    });
  });

  describe('urql: idempotencyExchange and reconcile(client, key)', () => {
    const urql = (options: { reconcile?: boolean } = {}) =>
      new Client({
        url: payments.graphqlUrl,
        fetchOptions: { headers: CAROL },
        exchanges: [
          cacheExchange,
          idempotencyExchange({ retention: '30m', maxAttempts: 1, ...options }),
          fetchExchange,
        ],
      });

    it('R2: the same key past the window with reconcile: the result’s networkError carries the stored result', async () => {
      const key = `order-${crypto.randomUUID()}`;
      const paid = await urql()
        .mutation(PAY, { input: { amount: 3401, currency: 'EUR' } }, { idempotencyKey: key })
        .toPromise();
      expect(paid.error).toBeUndefined();
      const from = payments.proxy.requests.length;
      const late = await urql({ reconcile: true })
        .mutation(
          PAY,
          { input: { amount: 3401, currency: 'EUR' } },
          { idempotencyKey: key, idempotencyFirstAttemptAt: longAgo() },
        )
        .toPromise();
      const refusal = late.error?.networkError as RetentionWindowExceededError;
      expect(refusal).toBeInstanceOf(RetentionWindowExceededError);
      expect(executed(refusal.reconciliation)).toMatchObject({
        key,
        status: 200,
        value: { data: { createPayment: paid.data.createPayment } },
      });
      expect(payments.graphqlRequests(from).map((request) => request.idempotencyKey)).toEqual([undefined]);
      expect(await payments.charges(3401)).toHaveLength(1);
      expect(executed(await reconcileUrql(urql(), key, { operation: 'Mutation.createPayment' })).value).toEqual({
        data: { createPayment: paid.data.createPayment },
      });
    });
  });
});

describe('reconcile a key still in progress', () => {
  let payments: PaymentsUnderTest;
  beforeAll(async () => {
    payments = await startPayments({ IDEM_TTL: '30m', CHANNEL_DELAY_MS: '2000' });
  });
  afterAll(() => payments?.close());

  it('E3: reconcile(client, key) answers processing while the first charge runs, executed once it is stored', async () => {
    const trpc = createTRPCClient<PaymentsRouter>({
      links: [
        trpcIdempotencyLink<PaymentsRouter>({ retention: '30m' }),
        httpLink({ url: payments.trpcUrl, headers: ({ op }) => ({ ...idempotencyHeaders(op), ...CAROL }) }),
      ],
    });
    const key = `order-${crypto.randomUUID()}`;
    const charging = trpc.payments.create.mutate(
      { amount: 3501, currency: 'EUR' },
      { context: { idempotencyKey: key } },
    );
    await payments.waitForEvent((event) => event.type === 'claimed' && event.key === key);
    const running = await reconcileTRPC(trpc, key, { operation: 'payments.create' });
    expect(running).toMatchObject({ kind: 'processing', key, since: expect.any(Date) });
    const payment = await charging;
    expect(executed(await reconcileTRPC(trpc, key, { operation: 'payments.create' })).value).toEqual(payment);
  });
});
