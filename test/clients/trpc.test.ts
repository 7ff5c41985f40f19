/**
 * `@trpc/client` with tRPC v11's own `retryLink` around idem's `idempotencyLink`, against the
 * payments example over HTTP, through a proxy that lets the server charge and then loses its
 * answers. Set up as a new user would: `retryLink` retrying network errors, `idempotencyLink({
 * retention: '24h', maxAttempts: 1 })`, `httpLink` with `idempotencyHeaders(op)` (or
 * `httpBatchStreamLink` with keys in the input). Whatever layer retries, one mutation keeps one
 * key and is charged once (SPEC E2, K1, K4, R2).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTRPCClient,
  httpBatchStreamLink,
  httpLink,
  retryLink,
  TRPCClientError,
  type TRPCLink,
} from '@trpc/client';
import {
  idempotencyHeaders,
  idempotencyLink,
  RetentionWindowExceededError,
  RetriesExhaustedError,
  type IdempotencyLinkOptions,
} from '@idem/trpc/client';
import type { PaymentsRouter } from '../../examples/payments/src/trpc.ts';
import type { ProxiedRequest } from './support/lossy-proxy.ts';
import { startPayments, type PaymentsUnderTest } from './support/payments.ts';

/** The retry predicate of tRPC's retryLink docs, for mutations: retry what carries no server answer, 4 calls in all. */
function networkRetryLink(seen: unknown[] = []): TRPCLink<PaymentsRouter> {
  return retryLink<PaymentsRouter>({
    retry: ({ error, attempts }) => {
      seen.push(error);
      if (error.data) return false;
      return attempts < 4;
    },
    retryDelayMs: () => 5,
  });
}

type Terminating = 'httpLink' | 'httpBatchStreamLink';

function terminatingLink(payments: PaymentsUnderTest, kind: Terminating): TRPCLink<PaymentsRouter> {
  return kind === 'httpLink'
    ? httpLink({ url: payments.trpcUrl, headers: ({ op }) => idempotencyHeaders(op) })
    : httpBatchStreamLink({ url: payments.trpcUrl });
}

/** `idempotencyLink` as the new user sets it up; batch links take keys in the input (one per call). */
function idem(kind: Terminating, options: Partial<IdempotencyLinkOptions> = {}): TRPCLink<PaymentsRouter> {
  return idempotencyLink<PaymentsRouter>({
    retention: '24h',
    maxAttempts: 1,
    ...(kind === 'httpBatchStreamLink' ? { key: { header: false } } : {}),
    ...options,
  });
}

/** The key each request carried: its header, or (batch stream) its input field, read back from the server's events. */
function keysOf(requests: readonly ProxiedRequest[]): Array<string | undefined> {
  return [...new Set(requests.map((request) => request.idempotencyKey))];
}

describe("tRPC's retryLink with idempotencyLink, against the payments example", () => {
  let payments: PaymentsUnderTest;
  beforeAll(async () => {
    payments = await startPayments();
  });
  afterAll(() => payments?.close());

  const trpcRequests = (from: number) =>
    payments.proxy.requests.slice(from).filter((request) => request.path.startsWith('/trpc/payments.create'));
  /** The keys the server claimed or replayed for `amount`'s payments since `from` events. */
  const serverKeys = (from: number) => [
    ...new Set(
      payments.events
        .slice(from)
        .filter((event) => event.type === 'claimed' || event.type === 'replayed')
        .map((event) => event.key),
    ),
  ];

  for (const kind of ['httpLink', 'httpBatchStreamLink'] as const) {
    for (const place of ['outside', 'inside'] as const) {
      it(`E2, K1: retryLink ${place} idempotencyLink, ${kind}: three lost answers, four requests, one key, one charge`, async () => {
        const amount = kind === 'httpLink' ? (place === 'outside' ? 2101 : 2102) : place === 'outside' ? 2103 : 2104;
        const seen: unknown[] = [];
        const links =
          place === 'outside'
            ? [networkRetryLink(seen), idem(kind), terminatingLink(payments, kind)]
            : [idem(kind), networkRetryLink(seen), terminatingLink(payments, kind)];
        const client = createTRPCClient<PaymentsRouter>({ links });
        const from = payments.proxy.requests.length;
        const fromEvents = payments.events.length;
        payments.proxy.dropNextResponses(3);

        const payment = await client.payments.create.mutate({ amount, currency: 'EUR' });

        const requests = trpcRequests(from);
        expect(requests.map((request) => [request.dropped, request.replayed || undefined])).toEqual([
          [true, undefined], // executed: the charge happens here, its answer is lost
          [true, kind === 'httpLink' ? true : undefined], // replayed, lost (a stream carries no header)
          [true, kind === 'httpLink' ? true : undefined],
          [false, kind === 'httpLink' ? true : undefined], // the replay reaches the client
        ]);
        if (kind === 'httpLink') {
          expect(keysOf(requests)).toHaveLength(1);
          expect(keysOf(requests)[0]).toMatch(/^"[0-9a-f-]{36}"$/);
        }
        expect(serverKeys(fromEvents)).toHaveLength(1);
        expect(payments.events.slice(fromEvents).filter((event) => event.type === 'claimed')).toHaveLength(1);
        expect(payments.events.slice(fromEvents).filter((event) => event.type === 'replayed')).toHaveLength(3);
        expect(seen).toHaveLength(3);
        if (place === 'outside') for (const error of seen) expect(error).toBeInstanceOf(RetriesExhaustedError);
        const charges = await payments.charges(amount);
        expect(charges).toHaveLength(1);
        expect(payment.id).toBe(charges[0]!.id);
      });
    }
  }

  it("E2, K1: the caller's own loop sends the same mutation again after a RetriesExhaustedError: the same key, one charge", async () => {
    const client = createTRPCClient<PaymentsRouter>({
      links: [idem('httpLink'), terminatingLink(payments, 'httpLink')],
    });
    const from = payments.proxy.requests.length;
    payments.proxy.dropNextResponses(2);
    let payment: { id: string } | undefined;
    const failures: unknown[] = [];
    for (let call = 0; call < 3 && !payment; call++) {
      try {
        payment = await client.payments.create.mutate({ amount: 2105, currency: 'EUR' });
      } catch (error) {
        failures.push(error instanceof TRPCClientError ? error.cause : error);
      }
    }
    expect(failures).toEqual([expect.any(RetriesExhaustedError), expect.any(RetriesExhaustedError)]);
    const requests = trpcRequests(from);
    expect(requests).toHaveLength(3);
    expect(keysOf(requests)).toHaveLength(1);
    expect(requests.at(-1)!.replayed).toBe(true);
    expect(await payments.charges(2105)).toEqual([expect.objectContaining({ id: payment!.id })]);
  });

  it('gives two mutations their own keys once the first was answered, even with the same input', async () => {
    const client = createTRPCClient<PaymentsRouter>({
      links: [networkRetryLink(), idem('httpLink'), terminatingLink(payments, 'httpLink')],
    });
    const from = payments.proxy.requests.length;
    await client.payments.create.mutate({ amount: 2106, currency: 'EUR' });
    await client.payments.create.mutate({ amount: 2106, currency: 'EUR' });
    expect(keysOf(trpcRequests(from))).toHaveLength(2);
    expect(await payments.charges(2106)).toHaveLength(2);
  });

  it('R2: retryLink outside never gets a request past the retention: the link refuses each of its retries before sending', async () => {
    let clock = Date.now();
    const seen: unknown[] = [];
    const client = createTRPCClient<PaymentsRouter>({
      links: [
        // Each of retryLink's retries comes 20 s later, past the 10 s retention.
        retryLink<PaymentsRouter>({
          retry: ({ error, attempts }) => {
            seen.push(error);
            return !error.data && attempts < 4;
          },
          retryDelayMs: () => {
            clock += 20_000;
            return 5;
          },
        }),
        idem('httpLink', { retention: '10s', now: () => clock }),
        terminatingLink(payments, 'httpLink'),
      ],
    });
    const from = payments.proxy.requests.length;
    payments.proxy.dropNextResponses(1);

    const error = await client.payments.create.mutate({ amount: 2107, currency: 'EUR' }).catch((e: unknown) => e);

    expect(error).toBeInstanceOf(TRPCClientError);
    expect((error as TRPCClientError<PaymentsRouter>).cause).toBeInstanceOf(RetentionWindowExceededError);
    expect(seen.map((failure) => (failure as Error).constructor.name)).toEqual([
      'RetriesExhaustedError',
      'RetentionWindowExceededError',
      'RetentionWindowExceededError',
      'RetentionWindowExceededError',
    ]);
    expect(trpcRequests(from)).toHaveLength(1);
    expect(await payments.charges(2107)).toHaveLength(1);
  });
});
