/**
 * `createIdempotentFetch` (`@idem/envelop/client`) under graphql-request and under plain
 * `fetch` with the caller's own retry loop, against the payments example over HTTP, with a proxy
 * that lets the server charge and then loses its answers (SPEC E2, K1, R2).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GraphQLClient } from 'graphql-request';
import {
  createIdempotentFetch,
  RetentionWindowExceededError,
  RetriesExhaustedError,
  type IdempotentFetchOptions,
} from '@idem/envelop/client';
import { keysOf, PAY, startPayments, type Payment, type PaymentsUnderTest } from './support/payments.ts';

/** A mutation as a plain `fetch` sends it. */
function payRequest(amount: number, headers: Record<string, string> = {}): RequestInit {
  return {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/graphql-response+json', ...headers },
    body: JSON.stringify({ query: PAY, variables: { input: { amount, currency: 'EUR' } } }),
  };
}

/** The caller's own retry layer: sends the same request again after a `RetriesExhaustedError`, up to `times` more. */
async function retryingCaller(
  fetch: typeof globalThis.fetch,
  url: string,
  init: RequestInit,
  times: number,
  seen: unknown[] = [],
): Promise<Response> {
  for (let retries = 0; ; retries++) {
    try {
      return await fetch(url, init);
    } catch (error) {
      seen.push(error);
      if (!(error instanceof RetriesExhaustedError) || retries >= times) throw error;
    }
  }
}

describe('createIdempotentFetch against the payments example', () => {
  let payments: PaymentsUnderTest;
  const idemFetch = (options: Partial<IdempotentFetchOptions> = {}) =>
    createIdempotentFetch({ policyUrl: payments.policyUrl, maxAttempts: 2, initialDelayMs: 10, ...options });
  beforeAll(async () => {
    payments = await startPayments();
  });
  afterAll(() => payments?.close());

  describe('graphql-request', () => {
    it('E2: a lost answer — idem retries with the same key and gets the replay — one charge', async () => {
      const client = new GraphQLClient(payments.graphqlUrl, { fetch: idemFetch() });
      const from = payments.proxy.requests.length;
      payments.proxy.dropNextResponses(1);

      const data = await client.request<{ createPayment: Payment }>(PAY, { input: { amount: 4101, currency: 'EUR' } });

      const requests = payments.graphqlRequests(from);
      expect(requests.map((request) => [request.dropped, request.replayed])).toEqual([
        [true, false],
        [false, true],
      ]);
      expect(keysOf(requests)).toHaveLength(1);
      const charges = await payments.charges(4101);
      expect(charges).toHaveLength(1);
      expect(data.createPayment.id).toBe(charges[0]!.id);
    });

    it("K1: the caller's key in requestHeaders survives idem's retries and the caller's own retry of the request: one charge", async () => {
      const client = new GraphQLClient(payments.graphqlUrl, { fetch: idemFetch() });
      const from = payments.proxy.requests.length;
      payments.proxy.dropNextResponses(3);
      const pay = () =>
        client.request({
          document: PAY,
          variables: { input: { amount: 4102, currency: 'EUR' } },
          requestHeaders: { 'Idempotency-Key': 'order-4102' },
        });

      await expect(pay()).rejects.toBeInstanceOf(RetriesExhaustedError);
      await pay();

      const requests = payments.graphqlRequests(from);
      expect(requests).toHaveLength(4);
      expect(keysOf(requests)).toEqual(['"order-4102"']);
      expect(requests.at(-1)!.replayed).toBe(true);
      expect(await payments.charges(4102)).toHaveLength(1);
    });
  });

  describe('plain fetch', () => {
    it("K1: the caller's retry loop sends the same request after idem gave up: the fetch keeps its key — 4 requests, 1 key, 1 charge", async () => {
      const fetch = idemFetch();
      const from = payments.proxy.requests.length;
      payments.proxy.dropNextResponses(3);
      const seen: unknown[] = [];

      const response = await retryingCaller(fetch, payments.graphqlUrl, payRequest(4201), 3, seen);

      expect(seen).toHaveLength(1);
      expect(seen[0]).toBeInstanceOf(RetriesExhaustedError);
      expect(response.headers.get('idempotent-replayed')).toBe('true');
      const requests = payments.graphqlRequests(from);
      expect(requests).toHaveLength(4);
      expect(keysOf(requests)).toHaveLength(1);
      expect(keysOf(requests)[0]).toBe(`"${(seen[0] as RetriesExhaustedError).key}"`);
      expect(await payments.charges(4201)).toHaveLength(1);
    });

    it('a request that was answered is forgotten: the same mutation sent again is a new operation, with a new key', async () => {
      const fetch = idemFetch();
      const from = payments.proxy.requests.length;
      await fetch(payments.graphqlUrl, payRequest(4202));
      await fetch(payments.graphqlUrl, payRequest(4202));
      expect(keysOf(payments.graphqlRequests(from))).toHaveLength(2);
      expect(await payments.charges(4202)).toHaveLength(2);
    });

    it('another mutation while one is unresolved gets its own key; the unresolved one keeps its own', async () => {
      const fetch = idemFetch();
      const from = payments.proxy.requests.length;
      payments.proxy.dropNextResponses(2);
      const first = await fetch(payments.graphqlUrl, payRequest(4203)).catch((error: unknown) => error);
      expect(first).toBeInstanceOf(RetriesExhaustedError);
      await fetch(payments.graphqlUrl, payRequest(4204));
      await fetch(payments.graphqlUrl, payRequest(4203));

      const requests = payments.graphqlRequests(from);
      expect(requests.map((request) => request.idempotencyKey)).toEqual([
        `"${(first as RetriesExhaustedError).key}"`,
        `"${(first as RetriesExhaustedError).key}"`,
        expect.not.stringContaining((first as RetriesExhaustedError).key),
        `"${(first as RetriesExhaustedError).key}"`,
      ]);
      expect(await payments.charges(4203)).toHaveLength(1);
      expect(await payments.charges(4204)).toHaveLength(1);
    });
  });
});

describe('createIdempotentFetch past the published retention', () => {
  let payments: PaymentsUnderTest;
  beforeAll(async () => {
    // 3 s retention: the default safety margin (1 s) puts the deadline 2 s after the first attempt.
    payments = await startPayments({ IDEM_TTL: '3s', IDEM_LEASE: '1s' });
  });
  afterAll(() => payments?.close());

  it("R2: every answer lost — the fetch stops at the deadline; the caller's retries of the same request keep the key and deadline, and send nothing once it has passed", async () => {
    const fetch = createIdempotentFetch({
      policyUrl: payments.policyUrl,
      maxAttempts: Number.POSITIVE_INFINITY,
      initialDelayMs: 200,
      maxDelayMs: 400,
    });
    const from = payments.proxy.requests.length;
    payments.proxy.dropNextResponses(1000);

    const first = await fetch(payments.graphqlUrl, payRequest(4301)).catch((error: unknown) => error);
    expect(first).toBeInstanceOf(RetentionWindowExceededError);
    const { key, deadline } = first as RetentionWindowExceededError;
    // Right away: an attempt may still start before the deadline. After it: none.
    const again = await fetch(payments.graphqlUrl, payRequest(4301)).catch((error: unknown) => error);
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, deadline - Date.now())));
    payments.proxy.stopDropping();
    const later = await fetch(payments.graphqlUrl, payRequest(4301)).catch((error: unknown) => error);

    for (const refusal of [again, later])
      expect(refusal).toMatchObject({ name: 'RetentionWindowExceededError', key, deadline });
    expect((later as RetentionWindowExceededError).attempts).toBe(0);
    const requests = payments.graphqlRequests(from);
    expect(requests).toHaveLength(
      (first as RetentionWindowExceededError).attempts + (again as RetentionWindowExceededError).attempts,
    );
    expect(keysOf(requests)).toEqual([`"${key}"`]);
    expect(await payments.charges(4301)).toHaveLength(1);
  });
});
