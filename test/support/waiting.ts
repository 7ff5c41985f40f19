/**
 * How the tests wait, in one place. A server-side deadline (a record's `expiresAt`, its
 * `leaseUntil`) is waited out from what the store recorded, never from the test's own clock:
 * on a loaded machine the claim lands a few hundred milliseconds after the test's `Date.now()`,
 * and a retry timed from the test's clock reaches the server inside the retention (issue 17).
 * Anything else is waited for as an observation (an event, a row) with a bound, and a fixed
 * sleep only where nothing races it.
 */
import type { IdempotencyStore } from '@idem/core';
import type { IdempotencyRecord } from '@idem/core/store';

/** Resolves after `ms`. */
export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * A clock to wait on. The default is this host's, which is the stores' clock in the suite:
 * SQLite reads the host's time, PostgreSQL runs on 127.0.0.1, MemoryStore uses `Date.now`.
 */
export type Clock = () => Date | Promise<Date>;

const hostClock: Clock = () => new Date();

export interface WaitPastOptions {
  /** Whose time counts. Defaults to this host's clock. */
  clock?: Clock;
  /** How far past the instant to wait. Defaults to 1 ms (timestamps are truncated to milliseconds). */
  marginMs?: number;
  /** Refuse to wait for an instant further away than this. Defaults to 60 s. */
  timeoutMs?: number;
}

/** Resolves once `clock` reads at least `marginMs` past `instant`, with that reading. */
export async function waitPast(
  instant: Date,
  { clock = hostClock, marginMs = 1, timeoutMs = 60_000 }: WaitPastOptions = {},
): Promise<Date> {
  const target = instant.getTime() + marginMs;
  const giveUpAt = Date.now() + timeoutMs;
  for (;;) {
    const now = await clock();
    const left = target - now.getTime();
    if (left <= 0) return now;
    if (Date.now() + left > giveUpAt)
      throw new Error(
        `[test] ${instant.toISOString()} is more than ${timeoutMs} ms away (clock: ${now.toISOString()})`,
      );
    await sleep(Math.min(left, 1000));
  }
}

/** The live record of (scope, key); fails when there is none. */
export async function liveRecord(
  store: Pick<IdempotencyStore, 'get'>,
  scope: string,
  key: string,
): Promise<IdempotencyRecord> {
  const record = await store.get(scope, key);
  if (!record) throw new Error(`[test] no record of key "${key}" in scope "${scope}"`);
  return record;
}

/**
 * Waits until the retention the store recorded for (scope, key) has passed; returns the record as
 * it was. Retention counts from completion (R1: `complete` moves `expiresAt`), so a record still
 * processing is first waited for until its outcome is stored.
 */
export async function untilExpired(
  store: Pick<IdempotencyStore, 'get'>,
  scope: string,
  key: string,
  options?: WaitPastOptions,
): Promise<IdempotencyRecord> {
  const record = await pollUntil(async () => {
    const current = await liveRecord(store, scope, key);
    return current.state === 'processing' ? undefined : current;
  });
  await waitPast(record.expiresAt, options);
  return record;
}

/** Waits until the lease the store recorded for (scope, key) has passed; returns the record as it was. */
export async function untilLeaseEnds(
  store: Pick<IdempotencyStore, 'get'>,
  scope: string,
  key: string,
  options?: WaitPastOptions,
): Promise<IdempotencyRecord> {
  const record = await liveRecord(store, scope, key);
  await waitPast(record.leaseUntil, options);
  return record;
}

/**
 * Calls `attempt` every `intervalMs` until it returns something other than undefined, at most
 * `maxAttempts` times and for at most `timeoutMs`: every wait is bounded.
 */
export async function pollUntil<T>(
  attempt: () => Promise<T | undefined> | T | undefined,
  {
    intervalMs = 20,
    timeoutMs = 20_000,
    maxAttempts = 10_000,
  }: { intervalMs?: number; timeoutMs?: number; maxAttempts?: number } = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (let round = 0; round < maxAttempts && Date.now() < deadline; round++) {
    const result = await attempt();
    if (result !== undefined) return result;
    await sleep(intervalMs);
  }
  throw new Error(`[test] gave up after ${timeoutMs} ms / ${maxAttempts} attempts`);
}

/** The first of `events` that matches, as soon as it has been pushed (bounded by `timeoutMs`). */
export function untilEvent<E, M extends E = E>(
  events: readonly E[],
  matches: ((event: E) => event is M) | ((event: E) => boolean),
  { timeoutMs = 20_000 } = {},
): Promise<M> {
  return pollUntil(() => events.find(matches) as M | undefined, { intervalMs: 10, timeoutMs });
}
