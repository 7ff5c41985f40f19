/**
 * urql 6 against the payments example over HTTP, with `retryExchange` and idem's exchange, and
 * a proxy that lets the server charge and then loses its answers. One mutation must keep one
 * key through idem's retries and retryExchange's, and be charged once (SPEC E2, K1, R2).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, cacheExchange, fetchExchange, type CombinedError, type Exchange } from '@urql/core';
import { retryExchange } from '@urql/exchange-retry';
import {
  idempotencyExchange,
  RetentionWindowExceededError,
  RetriesExhaustedError,
  type IdempotencyExchangeOptions,
} from '@idem/envelop/urql';
import { keysOf, PAY, startPayments, type Payment, type PaymentsUnderTest } from './support/payments.ts';

/**
 * retryExchange (`maxNumberAttempts` sends in all, `delayMs` apart), recording the network error
 * of every failed result it sees (it asks `retryIf` before it counts attempts, so the last one,
 * not retried, is recorded too).
 */
function recordingRetryExchange(maxNumberAttempts = 2, delayMs = 10) {
  const networkErrors: unknown[] = [];
  const exchange = retryExchange({
    initialDelayMs: delayMs,
    maxDelayMs: delayMs,
    randomDelay: false,
    maxNumberAttempts,
    retryIf: (error: CombinedError) => {
      if (!error.networkError) return false;
      networkErrors.push(error.networkError);
      return true;
    },
  });
  return { exchange, networkErrors };
}

const ORDERS: Record<string, (retry: Exchange, idem: Exchange) => Exchange[]> = {
  'retryExchange before idempotencyExchange': (retry, idem) => [cacheExchange, retry, idem, fetchExchange],
  'idempotencyExchange before retryExchange': (retry, idem) => [cacheExchange, idem, retry, fetchExchange],
};

function urqlClient(
  payments: PaymentsUnderTest,
  order: keyof typeof ORDERS,
  options: Partial<IdempotencyExchangeOptions> = {},
  maxNumberAttempts = 2,
  delayMs = 10,
) {
  const retry = recordingRetryExchange(maxNumberAttempts, delayMs);
  const idem = idempotencyExchange({ policyUrl: payments.policyUrl, maxAttempts: 2, initialDelayMs: 10, ...options });
  const client = new Client({ url: payments.graphqlUrl, exchanges: ORDERS[order]!(retry.exchange, idem) });
  return { client, networkErrors: retry.networkErrors };
}

describe('urql 6 with retryExchange and idempotencyExchange, against the payments example', () => {
  let payments: PaymentsUnderTest;
  beforeAll(async () => {
    payments = await startPayments();
  });
  afterAll(() => payments?.close());

  describe.each(Object.keys(ORDERS))('%s', (order) => {
    const amount = order.startsWith('retry') ? 2101 : 2201;

    it('E2, K1: three lost answers — idem retries, gives up, retryExchange re-sends the operation — one key on every request, one charge', async () => {
      const { client, networkErrors } = urqlClient(payments, order);
      const from = payments.proxy.requests.length;
      payments.proxy.dropNextResponses(3);

      const result = await client
        .mutation<{ createPayment: Payment }>(PAY, { input: { amount, currency: 'EUR' } })
        .toPromise();

      expect(result.error).toBeUndefined();
      const requests = payments.graphqlRequests(from);
      expect(requests.map((request) => [request.dropped, request.replayed])).toEqual([
        [true, false], // executed: the charge happens here, its answer is lost
        [true, true], // idem's retry: replayed, lost
        [true, true], // retryExchange's retry, idem's first attempt: replayed, lost
        [false, true], // idem's second attempt: the replay reaches the client
      ]);
      expect(keysOf(requests)).toHaveLength(1);
      expect(keysOf(requests)[0]).toMatch(/^"[0-9a-f-]{36}"$/);
      expect(networkErrors).toHaveLength(1);
      expect(networkErrors[0]).toBeInstanceOf(RetriesExhaustedError);
      const charges = await payments.charges(amount);
      expect(charges).toHaveLength(1);
      expect(result.data?.createPayment.id).toBe(charges[0]!.id);
    });

    it('gives every mutation operation its own key, and sends none with queries', async () => {
      const { client } = urqlClient(payments, order);
      const from = payments.proxy.requests.length;
      await client.mutation(PAY, { input: { amount: amount + 1, currency: 'EUR' } }).toPromise();
      await client.mutation(PAY, { input: { amount: amount + 1, currency: 'EUR' } }).toPromise();
      await client.query('query { ledger { id } }', {}, { requestPolicy: 'network-only' }).toPromise();

      const requests = payments.graphqlRequests(from);
      expect(requests).toHaveLength(3);
      expect(new Set(requests.slice(0, 2).map((request) => request.idempotencyKey)).size).toBe(2);
      expect(requests[2]!.idempotencyKey).toBeUndefined();
      expect(await payments.charges(amount + 1)).toHaveLength(2);
    });
  });

  it("keeps the caller's key, from the context or from fetchOptions", async () => {
    const { client } = urqlClient(payments, 'retryExchange before idempotencyExchange');
    const from = payments.proxy.requests.length;
    payments.proxy.dropNextResponses(1);
    await client
      .mutation(PAY, { input: { amount: 2301, currency: 'EUR' } }, { idempotencyKey: 'order-2301' })
      .toPromise();
    payments.proxy.dropNextResponses(1);
    await client
      .mutation(
        PAY,
        { input: { amount: 2302, currency: 'EUR' } },
        { fetchOptions: { headers: { 'Idempotency-Key': 'order-2302' } } },
      )
      .toPromise();
    expect(keysOf(payments.graphqlRequests(from))).toEqual(['"order-2301"', '"order-2302"']);
    expect(await payments.charges(2301)).toHaveLength(1);
    expect(await payments.charges(2302)).toHaveLength(1);
  });

  it('F3: a 422 (the same key with another payload) is the result: not retried', async () => {
    const { client, networkErrors } = urqlClient(payments, 'retryExchange before idempotencyExchange');
    await client
      .mutation(PAY, { input: { amount: 2401, currency: 'EUR' } }, { idempotencyKey: 'order-2401' })
      .toPromise();
    const from = payments.proxy.requests.length;
    const reused = await client
      .mutation(PAY, { input: { amount: 2402, currency: 'EUR' } }, { idempotencyKey: 'order-2401' })
      .toPromise();
    expect(reused.error?.graphQLErrors[0]?.extensions['code']).toBe('IDEMPOTENCY_KEY_REUSED');
    expect(payments.graphqlRequests(from).map((request) => request.status)).toEqual([422]);
    expect(networkErrors).toEqual([]);
    expect(await payments.charges(2402)).toHaveLength(0);
  });

  it("resumes a key from an earlier failure: its key and firstAttemptAt in the context get the replay; past that key's deadline, a refusal without a request (R2)", async () => {
    const { client } = urqlClient(payments, 'retryExchange before idempotencyExchange', {}, 1);
    const variables = { input: { amount: 2303, currency: 'EUR' } };
    payments.proxy.dropNextResponses(2);
    const failure = (await client.mutation(PAY, variables).toPromise()).error?.networkError as RetriesExhaustedError;
    expect(failure).toBeInstanceOf(RetriesExhaustedError);

    const from = payments.proxy.requests.length;
    const resumed = await client
      .mutation(PAY, variables, { idempotencyKey: failure.key, idempotencyFirstAttemptAt: failure.firstAttemptAt })
      .toPromise();
    expect(resumed.error).toBeUndefined();
    expect(payments.graphqlRequests(from).map((request) => [request.idempotencyKey, request.replayed])).toEqual([
      [`"${failure.key}"`, true],
    ]);

    const longAgo = failure.firstAttemptAt - failure.retentionMs;
    const late = await client
      .mutation(PAY, variables, { idempotencyKey: failure.key, idempotencyFirstAttemptAt: longAgo })
      .toPromise();
    expect(late.error?.networkError).toMatchObject({
      name: 'RetentionWindowExceededError',
      key: failure.key,
      firstAttemptAt: longAgo,
      attempts: 0,
    });
    expect(payments.graphqlRequests(from)).toHaveLength(1);
    expect(await payments.charges(2303)).toHaveLength(1);
  });

  it('refuses a key that is not one (K3) as the result’s networkError, without sending anything', async () => {
    const { client } = urqlClient(payments, 'retryExchange before idempotencyExchange', {}, 1);
    const from = payments.proxy.requests.length;
    const result = await client
      .mutation(PAY, { input: { amount: 2501, currency: 'EUR' } }, { idempotencyKey: 'not "a" key' })
      .toPromise();
    expect(result.error?.networkError).toMatchObject({ name: 'InvalidKeyError', code: 'idempotency_key_invalid' });
    expect(payments.graphqlRequests(from)).toEqual([]);
  });
});

describe('urql 6 past the published retention', () => {
  let payments: PaymentsUnderTest;
  beforeAll(async () => {
    // 3 s retention: the default safety margin (1 s) puts the deadline 2 s after the first attempt.
    payments = await startPayments({ IDEM_TTL: '3s', IDEM_LEASE: '1s' });
  });
  afterAll(() => payments?.close());

  it.each(Object.keys(ORDERS).map((order, index) => [order, 2601 + index] as const))(
    'R2 (%s): every answer lost — idem stops at the deadline, and retryExchange re-sending the operation after it is refused without a request',
    async (order, amount) => {
      // idem waits at most 400 ms, so it stops within 400 ms of the deadline; retryExchange re-sends 500 ms later, past it.
      const { client, networkErrors } = urqlClient(
        payments,
        order,
        { maxAttempts: Number.POSITIVE_INFINITY, initialDelayMs: 200, maxDelayMs: 400 },
        3,
        500,
      );
      const from = payments.proxy.requests.length;
      payments.proxy.dropNextResponses(1000);

      const result = await client.mutation(PAY, { input: { amount, currency: 'EUR' } }).toPromise();
      payments.proxy.stopDropping();

      const requests = payments.graphqlRequests(from);
      expect(requests.length).toBeGreaterThan(1);
      const calls = networkErrors as RetentionWindowExceededError[];
      expect(calls).toHaveLength(3);
      expect(calls.at(-1)).toBe(result.error?.networkError);
      expect(calls.every((error) => error instanceof RetentionWindowExceededError)).toBe(true);
      expect(keysOf(requests)).toEqual([`"${calls[0]!.key}"`]);
      expect(new Set(calls.map((error) => `${error.key} ${error.deadline}`)).size).toBe(1);
      expect(calls.map((error) => error.attempts)).toEqual([requests.length, 0, 0]);
      expect(await payments.charges(amount)).toHaveLength(1);
    },
  );
});
