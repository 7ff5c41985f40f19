/**
 * `createIdempotentFetch` keeps the key of a request it gave up on, so that a retry layer above
 * it (a client's, a caller's loop) sends the same operation again with the same key and deadline
 * (SPEC K1, R2). The network is down here: the underlying `fetch` records each request's key and
 * fails before sending, as a refused connection does.
 */
import { describe, expect, it } from 'vitest';
import { createIdempotentFetch, RetriesExhaustedError } from '@idem/envelop/client';

function downNetwork() {
  const keys: Array<string | null> = [];
  const fetch = async (_input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
    keys.push(new Headers(init?.headers).get('idempotency-key'));
    throw new TypeError('fetch failed');
  };
  return { fetch, keys };
}

const GRAPHQL_URL = 'http://127.0.0.1:1/graphql';
const mutation = (amount: number, headers: Record<string, string> = {}): RequestInit => ({
  method: 'POST',
  headers: { 'content-type': 'application/json', ...headers },
  body: JSON.stringify({
    query: 'mutation Pay($amount: Int!) { createPayment(amount: $amount) { id } }',
    variables: { amount },
  }),
});

async function failure(promise: Promise<unknown>): Promise<RetriesExhaustedError> {
  const error = await promise.then(
    () => undefined,
    (rejection: unknown) => rejection,
  );
  expect(error).toBeInstanceOf(RetriesExhaustedError);
  return error as RetriesExhaustedError;
}

describe('createIdempotentFetch: requests left unresolved', () => {
  it('K1: the same request sent again after a rejection carries the same key, and the deadline of its first attempt', async () => {
    const network = downNetwork();
    const fetch = createIdempotentFetch({ retention: '1h', fetch: network.fetch, maxAttempts: 1 });
    const first = await failure(fetch(GRAPHQL_URL, mutation(1)));
    const again = await failure(fetch(GRAPHQL_URL, mutation(1)));
    expect(again.key).toBe(first.key);
    expect(again.firstAttemptAt).toBe(first.firstAttemptAt);
    expect(network.keys).toEqual([`"${first.key}"`, `"${first.key}"`]);
  });

  it("K1: a caller's key sent again after a rejection keeps the deadline of its first attempt, whatever the body", async () => {
    const network = downNetwork();
    const fetch = createIdempotentFetch({ retention: '1h', fetch: network.fetch, maxAttempts: 1 });
    const first = await failure(fetch(GRAPHQL_URL, mutation(1, { 'Idempotency-Key': 'order-1' })));
    const again = await failure(fetch(GRAPHQL_URL, mutation(2, { 'Idempotency-Key': '"order-1"' })));
    expect([first.key, again.key]).toEqual(['order-1', 'order-1']);
    expect(again.firstAttemptAt).toBe(first.firstAttemptAt);
  });

  it('another body, or another URL, is another operation with its own key', async () => {
    const network = downNetwork();
    const fetch = createIdempotentFetch({ retention: '1h', fetch: network.fetch, maxAttempts: 1 });
    const first = await failure(fetch(GRAPHQL_URL, mutation(1)));
    const otherBody = await failure(fetch(GRAPHQL_URL, mutation(2)));
    const otherUrl = await failure(fetch('http://127.0.0.1:2/graphql', mutation(1)));
    expect(new Set([first.key, otherBody.key, otherUrl.key]).size).toBe(3);
  });

  it('keeps the last 100 unresolved requests: the oldest is forgotten first', async () => {
    const network = downNetwork();
    const fetch = createIdempotentFetch({ retention: '1h', fetch: network.fetch, maxAttempts: 1 });
    const failures: RetriesExhaustedError[] = [];
    for (let amount = 0; amount <= 100; amount++) failures.push(await failure(fetch(GRAPHQL_URL, mutation(amount))));
    const oldest = await failure(fetch(GRAPHQL_URL, mutation(0)));
    const newest = await failure(fetch(GRAPHQL_URL, mutation(100)));
    expect(oldest.key).not.toBe(failures[0]!.key);
    expect(newest.key).toBe(failures[100]!.key);
  });
});
