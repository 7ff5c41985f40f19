/**
 * Apollo Client 4 against the payments example over HTTP, with `RetryLink` above idem's link
 * and a proxy that lets the server charge and then loses its answers. One mutation must keep one
 * key through idem's retries and RetryLink's, and be charged once (SPEC E2, K1, R2).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApolloClient, ApolloLink, HttpLink, InMemoryCache, gql } from '@apollo/client';
import { RetryLink } from '@apollo/client/link/retry';
import {
  idempotencyLink,
  RetentionWindowExceededError,
  RetriesExhaustedError,
  type IdempotencyLinkOptions,
  type RetryNotice,
} from '@idem/envelop/apollo';
import { createIdempotentFetch } from '@idem/envelop/client';
import { keysOf, PAY, startPayments, type Payment, type PaymentsUnderTest } from './support/payments.ts';

const PAY_DOCUMENT = gql(PAY);

/** RetryLink (`max` calls in all, `delayMs` apart, no jitter), recording the error behind each of its retries. */
function recordingRetryLink(max = 5, delayMs = 10) {
  const retries: Array<{ error: unknown }> = [];
  const link = new RetryLink({
    delay: { initial: delayMs, max: delayMs, jitter: false },
    attempts: (count, _operation, error) => {
      if (count >= max) return false;
      retries.push({ error });
      return true;
    },
  });
  return { link, retries };
}

function apolloClient(
  payments: PaymentsUnderTest,
  options: Partial<IdempotencyLinkOptions> = {},
  retryLink: { max?: number; delayMs?: number } = {},
) {
  const retry = recordingRetryLink(retryLink.max, retryLink.delayMs);
  const notices: RetryNotice[] = [];
  const client = new ApolloClient({
    cache: new InMemoryCache(),
    link: ApolloLink.from([
      retry.link,
      idempotencyLink({
        policyUrl: payments.policyUrl,
        maxAttempts: 2,
        initialDelayMs: 10,
        onRetry: (notice) => notices.push(notice),
        ...options,
      }),
      new HttpLink({ uri: payments.graphqlUrl }),
    ]),
  });
  return { client, retries: retry.retries, notices };
}

describe('Apollo Client 4 with RetryLink and idempotencyLink, against the payments example', () => {
  let payments: PaymentsUnderTest;
  beforeAll(async () => {
    payments = await startPayments();
  });
  afterAll(() => payments?.close());

  it('E2, K1: three lost answers — idem retries, gives up, RetryLink retries the operation — one key on every request, one charge', async () => {
    const { client, retries, notices } = apolloClient(payments);
    const from = payments.proxy.requests.length;
    payments.proxy.dropNextResponses(3);

    const { data } = await client.mutate<{ createPayment: Payment }>({
      mutation: PAY_DOCUMENT,
      variables: { input: { amount: 1101, currency: 'EUR' } },
    });

    const requests = payments.graphqlRequests(from);
    expect(requests.map((request) => [request.dropped, request.replayed])).toEqual([
      [true, false], // executed: the charge happens here, its answer is lost
      [true, true], // idem's retry: replayed, lost
      [true, true], // RetryLink's retry, idem's first attempt: replayed, lost
      [false, true], // idem's second attempt: the replay reaches the client
    ]);
    expect(keysOf(requests)).toHaveLength(1);
    expect(keysOf(requests)[0]).toMatch(/^"[0-9a-f-]{36}"$/);
    expect(retries).toHaveLength(1);
    expect(retries[0]!.error).toBeInstanceOf(RetriesExhaustedError);
    expect(notices.map((notice) => notice.reason)).toEqual(['network', 'network']);
    const charges = await payments.charges(1101);
    expect(charges).toHaveLength(1);
    expect(data?.createPayment.id).toBe(charges[0]!.id);
  });

  it('gives every mutation operation its own key, and sends none with queries', async () => {
    const { client } = apolloClient(payments);
    const from = payments.proxy.requests.length;
    await client.mutate({ mutation: PAY_DOCUMENT, variables: { input: { amount: 1102, currency: 'EUR' } } });
    await client.mutate({ mutation: PAY_DOCUMENT, variables: { input: { amount: 1102, currency: 'EUR' } } });
    await client.query({ query: gql('query { ledger { id } }'), fetchPolicy: 'network-only' });

    const requests = payments.graphqlRequests(from);
    expect(requests).toHaveLength(3);
    expect(new Set(requests.slice(0, 2).map((request) => request.idempotencyKey)).size).toBe(2);
    expect(requests[2]!.idempotencyKey).toBeUndefined();
    expect(await payments.charges(1102)).toHaveLength(2);
  });

  it('K4: a mutation whose root field carries its own argument key passes through: no header key, no retries', async () => {
    const { client, notices } = apolloClient(payments);
    const from = payments.proxy.requests.length;
    const ARGUMENT_KEY = gql(
      'mutation Pay($input: PaymentInput!, $key: String) { createPayment(input: $input, idempotencyKey: $key) { id } }',
    );
    await client.mutate({
      mutation: ARGUMENT_KEY,
      variables: { input: { amount: 1108, currency: 'EUR' }, key: 'field-1108' },
    });
    expect(payments.graphqlRequests(from).map((request) => request.idempotencyKey)).toEqual([undefined]);
    expect(notices).toEqual([]);
    expect(await payments.charges(1108)).toHaveLength(1);
  });

  it("keeps the caller's key from context.idempotencyKey, sent as an sf-string", async () => {
    const { client } = apolloClient(payments);
    const from = payments.proxy.requests.length;
    payments.proxy.dropNextResponses(1);
    await client.mutate({
      mutation: PAY_DOCUMENT,
      variables: { input: { amount: 1103, currency: 'EUR' } },
      context: { idempotencyKey: 'order-1103' },
    });
    expect(keysOf(payments.graphqlRequests(from))).toEqual(['"order-1103"']);
    expect(await payments.charges(1103)).toHaveLength(1);
  });

  it('F3: a 422 (the same key with another payload) is the answer: not retried by the link nor by RetryLink', async () => {
    const { client, retries } = apolloClient(payments);
    await client.mutate({
      mutation: PAY_DOCUMENT,
      variables: { input: { amount: 1104, currency: 'EUR' } },
      context: { idempotencyKey: 'order-1104' },
    });
    const from = payments.proxy.requests.length;
    const reused = client.mutate({
      mutation: PAY_DOCUMENT,
      variables: { input: { amount: 1105, currency: 'EUR' } },
      context: { idempotencyKey: 'order-1104' },
    });
    await expect(reused).rejects.toMatchObject({
      errors: [expect.objectContaining({ extensions: expect.objectContaining({ code: 'IDEMPOTENCY_KEY_REUSED' }) })],
    });
    expect(payments.graphqlRequests(from).map((request) => request.status)).toEqual([422]);
    expect(retries).toEqual([]);
    expect(await payments.charges(1105)).toHaveLength(0);
  });

  it("resumes a key from an earlier failure: its key and firstAttemptAt in the context get the replay; past that key's deadline, a refusal without a request (R2)", async () => {
    const { client } = apolloClient(payments);
    const noRetryLink = new ApolloClient({
      cache: new InMemoryCache(),
      link: ApolloLink.from([
        idempotencyLink({ policyUrl: payments.policyUrl, maxAttempts: 2, initialDelayMs: 10 }),
        new HttpLink({ uri: payments.graphqlUrl }),
      ]),
    });
    const variables = { input: { amount: 1107, currency: 'EUR' } };
    payments.proxy.dropNextResponses(2);
    const failure = (await noRetryLink
      .mutate({ mutation: PAY_DOCUMENT, variables })
      .catch((error: unknown) => error)) as RetriesExhaustedError;
    expect(failure).toBeInstanceOf(RetriesExhaustedError);

    const from = payments.proxy.requests.length;
    await client.mutate({
      mutation: PAY_DOCUMENT,
      variables,
      context: { idempotencyKey: failure.key, idempotencyFirstAttemptAt: failure.firstAttemptAt },
    });
    expect(payments.graphqlRequests(from).map((request) => [request.idempotencyKey, request.replayed])).toEqual([
      [`"${failure.key}"`, true],
    ]);

    const longAgo = failure.firstAttemptAt - failure.retentionMs;
    const late = client.mutate({
      mutation: PAY_DOCUMENT,
      variables,
      context: { idempotencyKey: failure.key, idempotencyFirstAttemptAt: longAgo },
    });
    await expect(late).rejects.toMatchObject({
      name: 'RetentionWindowExceededError',
      key: failure.key,
      firstAttemptAt: longAgo,
      attempts: 0,
    });
    expect(payments.graphqlRequests(from)).toHaveLength(1);
    expect(await payments.charges(1107)).toHaveLength(1);
  });

  it('the setup the README used to recommend (RetryLink over HttpLink with createIdempotentFetch) now keeps one key too: one charge', async () => {
    const retry = recordingRetryLink();
    const client = new ApolloClient({
      cache: new InMemoryCache(),
      link: ApolloLink.from([
        retry.link,
        new HttpLink({
          uri: payments.graphqlUrl,
          fetch: createIdempotentFetch({ policyUrl: payments.policyUrl, maxAttempts: 2, initialDelayMs: 10 }),
        }),
      ]),
    });
    const from = payments.proxy.requests.length;
    payments.proxy.dropNextResponses(3);

    await client.mutate({ mutation: PAY_DOCUMENT, variables: { input: { amount: 1106, currency: 'EUR' } } });

    const requests = payments.graphqlRequests(from);
    expect(requests).toHaveLength(4);
    expect(keysOf(requests)).toHaveLength(1);
    expect(retry.retries).toHaveLength(1);
    expect(await payments.charges(1106)).toHaveLength(1);
  });
});

describe('Apollo Client 4 while the first request is still running', () => {
  let payments: PaymentsUnderTest;
  beforeAll(async () => {
    payments = await startPayments({ IDEM_TTL: '30m', CHANNEL_DELAY_MS: '800' });
  });
  afterAll(() => payments?.close());

  // HttpLink asks for application/graphql-response+json, so Yoga's 409 arrives as a result; with
  // Accept: application/json it arrives as a ServerError. The link reads both.
  it.each([
    ['a result (application/graphql-response+json)', 3101, {}],
    ['a ServerError (application/json)', 3102, { accept: 'application/json' }],
  ])(
    "E3: a second client with the same key meets 409 as %s, waits the server's Retry-After and gets the replay",
    async (_, amount, headers) => {
      const notices: RetryNotice[] = [];
      const client = new ApolloClient({
        cache: new InMemoryCache(),
        link: ApolloLink.from([
          idempotencyLink({ policyUrl: payments.policyUrl, onRetry: (notice) => notices.push(notice) }),
          new HttpLink({ uri: payments.graphqlUrl, headers }),
        ]),
      });
      const key = `order-${amount}`;
      const pay = () =>
        client.mutate<{ createPayment: Payment }>({
          mutation: PAY_DOCUMENT,
          variables: { input: { amount, currency: 'EUR' } },
          context: { idempotencyKey: key },
        });
      const from = payments.proxy.requests.length;
      const first = pay();
      await payments.waitForEvent((event) => event.type === 'claimed' && event.key === key);
      const second = await pay();

      expect(second.data).toEqual((await first).data);
      expect(notices[0]).toMatchObject({ reason: 'in_progress' });
      expect(notices[0]!.delayMs).toBeGreaterThanOrEqual(1000); // Retry-After: 1
      const statuses = payments.graphqlRequests(from).map((request) => [request.status, request.replayed]);
      expect(statuses).toContainEqual([409, false]);
      expect(statuses.at(-1)).toEqual([200, true]);
      expect(await payments.charges(amount)).toHaveLength(1);
    },
  );
});

describe('Apollo Client 4 past the published retention', () => {
  let payments: PaymentsUnderTest;
  beforeAll(async () => {
    // 3 s retention: the default safety margin (1 s) puts the deadline 2 s after the first attempt.
    payments = await startPayments({ IDEM_TTL: '3s', IDEM_LEASE: '1s' });
  });
  afterAll(() => payments?.close());

  it('R2: every answer lost — the link stops at the deadline, and RetryLink calling it again after the deadline is refused without a request', async () => {
    // idem waits at most 400 ms, so it stops within 400 ms of the deadline; RetryLink calls again 500 ms later, past it.
    const { client, retries } = apolloClient(
      payments,
      { maxAttempts: Number.POSITIVE_INFINITY, initialDelayMs: 200, maxDelayMs: 400 },
      { max: 3, delayMs: 500 },
    );
    const from = payments.proxy.requests.length;
    payments.proxy.dropNextResponses(1000);

    const failure = await client
      .mutate({ mutation: PAY_DOCUMENT, variables: { input: { amount: 1201, currency: 'EUR' } } })
      .catch((error: unknown) => error);
    payments.proxy.stopDropping();

    const requests = payments.graphqlRequests(from);
    expect(requests.length).toBeGreaterThan(1);
    const calls = [...retries.map(({ error }) => error), failure] as RetentionWindowExceededError[];
    expect(calls).toHaveLength(3);
    expect(calls.every((error) => error instanceof RetentionWindowExceededError)).toBe(true);
    expect(keysOf(requests)).toEqual([`"${calls[0]!.key}"`]);
    expect(new Set(calls.map((error) => `${error.key} ${error.deadline}`)).size).toBe(1);
    expect(calls.map((error) => error.attempts)).toEqual([requests.length, 0, 0]);
    expect(await payments.charges(1201)).toHaveLength(1);
  });
});
