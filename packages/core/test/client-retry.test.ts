/**
 * The client retry loop on a fake clock: back-off, Retry-After, the retention deadline (R1,
 * R2, R4), the typed errors, and the published-policy lookup.
 */
import { describe, expect, it, vi } from 'vitest';
import { createPolicyDocument, type EndpointPolicyDescription } from '@idem/core';
import {
  createRetentionResolver,
  defaultSafetyMargin,
  loadRetentionPolicy,
  newIdempotencyKey,
  parseRetryAfter,
  RetentionWindowExceededError,
  RetriesExhaustedError,
  retryDeadline,
  retryWithinRetention,
  type AttemptResult,
  type RetryReason,
} from '@idem/core/client';

const T0 = Date.UTC(2026, 10, 1, 12, 0, 0);

/** A clock that only moves when the loop sleeps (or when a test says so). */
function fakeClock(start = T0) {
  let time = start;
  const sleeps: number[] = [];
  return {
    now: () => time,
    advance: (ms: number) => void (time += ms),
    sleeps,
    sleep: async (ms: number, signal?: AbortSignal) => {
      signal?.throwIfAborted();
      sleeps.push(ms);
      time += ms;
    },
  };
}

const retry = (reason: RetryReason = 'network', retryAfterMs?: number): AttemptResult<never> => ({
  retry: { reason, retryAfterMs },
  error: new Error(`failed: ${reason}`),
});

/** An attempt that fails with `failures` (in order) and then returns `value`; records when each attempt started. */
function scripted<T>(clock: { now(): number }, failures: AttemptResult<never>[], value?: T) {
  const startedAt: number[] = [];
  const attempt = vi.fn(async (n: number): Promise<AttemptResult<T>> => {
    startedAt.push(clock.now());
    const failure = failures[n - 1];
    if (failure) return failure;
    if (value === undefined) throw new Error('the script ran out');
    return { done: value };
  });
  return { attempt, startedAt };
}

describe('retryWithinRetention', () => {
  it('returns the first attempt that succeeds, numbering the attempts from 1', async () => {
    const clock = fakeClock();
    const { attempt } = scripted(clock, [retry(), retry()], 'charged');
    await expect(
      retryWithinRetention(attempt, { key: 'k', retentionMs: 86_400_000, ...clock, random: () => 0.5 }),
    ).resolves.toBe('charged');
    expect(attempt.mock.calls.map(([n]) => n)).toEqual([1, 2, 3]);
  });

  it('backs off with full jitter: random() times a ceiling that doubles from initialDelayMs up to maxDelayMs', async () => {
    const top = fakeClock();
    const failures = Array.from({ length: 8 }, () => retry());
    await retryWithinRetention(scripted(top, failures, 'ok').attempt, {
      key: 'k',
      retentionMs: 86_400_000,
      ...top,
      random: () => 0.999999,
    });
    expect(top.sleeps.map(Math.round)).toEqual([250, 500, 1000, 2000, 4000, 8000, 16000, 30000]);

    const bottom = fakeClock();
    await retryWithinRetention(scripted(bottom, failures, 'ok').attempt, {
      key: 'k',
      retentionMs: 86_400_000,
      ...bottom,
      random: () => 0,
    });
    expect(bottom.sleeps).toEqual([0, 0, 0, 0, 0, 0, 0, 0]);

    const custom = fakeClock();
    await retryWithinRetention(scripted(custom, failures.slice(0, 3), 'ok').attempt, {
      key: 'k',
      retentionMs: 86_400_000,
      ...custom,
      random: () => 0.5,
      initialDelayMs: 100,
      maxDelayMs: 300,
    });
    expect(custom.sleeps).toEqual([50, 100, 150]);
  });

  it("E3: waits at least the server's Retry-After, even when the jitter draws less", async () => {
    const clock = fakeClock();
    const { attempt, startedAt } = scripted(
      clock,
      [retry('in_progress', 1000), retry('unavailable', 2000)],
      'replayed',
    );
    await retryWithinRetention(attempt, { key: 'k', retentionMs: 86_400_000, ...clock, random: () => 0 });
    expect(clock.sleeps).toEqual([1000, 2000]);
    expect(startedAt).toEqual([T0, T0 + 1000, T0 + 3000]);
  });

  it('keeps the longer jittered back-off when it exceeds Retry-After', async () => {
    const clock = fakeClock();
    const { attempt } = scripted(
      clock,
      Array.from({ length: 5 }, () => retry('in_progress', 1000)),
      'ok',
    );
    await retryWithinRetention(attempt, { key: 'k', retentionMs: 86_400_000, ...clock, random: () => 0.5 });
    // ceilings 250, 500, 1000, 2000, 4000 → halves 125, 250, 500, 1000, 2000; floor 1000
    expect(clock.sleeps).toEqual([1000, 1000, 1000, 1000, 2000]);
  });

  it('tells onRetry about each wait before it happens', async () => {
    const clock = fakeClock();
    const onRetry = vi.fn();
    const failure = retry('in_progress', 1000);
    await retryWithinRetention(scripted(clock, [failure], 'ok').attempt, {
      key: 'k',
      retentionMs: 86_400_000,
      ...clock,
      random: () => 0,
      onRetry,
    });
    expect(onRetry).toHaveBeenCalledExactlyOnceWith({
      attempt: 2,
      delayMs: 1000,
      reason: 'in_progress',
      error: (failure as { error: unknown }).error,
    });
  });

  describe('the retention deadline (R1, R2)', () => {
    it('R2: refuses a retry that would start at or after first attempt + retention - safety margin, instead of sending it', async () => {
      const clock = fakeClock();
      // retention 10 s, margin 1 s → deadline T0 + 9 s. Attempts at 0, 4 s, 8 s; the next would start at 12 s.
      const failures = [retry('in_progress', 4000), retry('in_progress', 4000), retry('in_progress', 4000)];
      const { attempt, startedAt } = scripted(clock, failures, 'never');
      const error = await retryWithinRetention(attempt, {
        key: 'order-42',
        retentionMs: 10_000,
        ...clock,
        random: () => 0,
      }).catch((e: unknown) => e);

      expect(error).toBeInstanceOf(RetentionWindowExceededError);
      const exceeded = error as RetentionWindowExceededError;
      expect(exceeded).toMatchObject({
        name: 'RetentionWindowExceededError',
        code: 'idempotency_retention_exceeded',
        key: 'order-42',
        firstAttemptAt: T0,
        retentionMs: 10_000,
        deadline: T0 + 9000,
        attempts: 3,
      });
      expect(exceeded.lastError).toBe((failures[2] as { error: unknown }).error);
      expect(exceeded.cause).toBe(exceeded.lastError);
      expect(exceeded.message).toMatch(/^\[idem\] /);
      expect(exceeded.message).toContain('executed as a new request');
      expect(exceeded.message).toContain('Reconcile');
      expect(startedAt).toEqual([T0, T0 + 4000, T0 + 8000]);
      expect(clock.sleeps).toEqual([4000, 4000]);
    });

    it('R2: a retry planned exactly at the deadline is refused; one a millisecond before it is sent', async () => {
      const at = fakeClock();
      const refused = scripted(at, [retry('in_progress', 9000)], 'ok');
      await expect(
        retryWithinRetention(refused.attempt, { key: 'k', retentionMs: 10_000, ...at, random: () => 0 }),
      ).rejects.toBeInstanceOf(RetentionWindowExceededError);
      expect(refused.attempt).toHaveBeenCalledTimes(1);

      const before = fakeClock();
      const sent = scripted(before, [retry('in_progress', 8999)], 'ok');
      await expect(
        retryWithinRetention(sent.attempt, { key: 'k', retentionMs: 10_000, ...before, random: () => 0 }),
      ).resolves.toBe('ok');
      expect(sent.startedAt).toEqual([T0, T0 + 8999]);
    });

    it('R2: checks the deadline again after a wait that overran (a suspended machine), and does not send the late retry', async () => {
      const clock = fakeClock();
      const { attempt } = scripted(clock, [retry()], 'ok');
      const oversleep = async (ms: number) => clock.advance(ms + 3_600_000);
      const error = await retryWithinRetention(attempt, {
        key: 'k',
        retentionMs: 60_000,
        now: clock.now,
        sleep: oversleep,
        random: () => 0.5,
      }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(RetentionWindowExceededError);
      expect(attempt).toHaveBeenCalledTimes(1);
    });

    it('R2: counts the deadline from firstAttemptAt when a key is resumed, and sends nothing for a key already past it', async () => {
      const clock = fakeClock();
      const { attempt } = scripted(clock, [], 'ok');
      const error = await retryWithinRetention(attempt, {
        key: 'k',
        retentionMs: 86_400_000,
        firstAttemptAt: T0 - 86_400_000,
        ...clock,
      }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(RetentionWindowExceededError);
      expect(error).toMatchObject({ attempts: 0, lastError: undefined, firstAttemptAt: T0 - 86_400_000 });
      expect(attempt).not.toHaveBeenCalled();

      const fresh = scripted(clock, [], 'ok');
      await expect(
        retryWithinRetention(fresh.attempt, {
          key: 'k',
          retentionMs: 86_400_000,
          firstAttemptAt: T0 - 3_600_000,
          ...clock,
        }),
      ).resolves.toBe('ok');
    });

    it('uses a safety margin of 10% of the retention, at least 1 s, at most 60 s, never more than half', () => {
      expect(defaultSafetyMargin(86_400_000)).toBe(60_000);
      expect(defaultSafetyMargin(300_000)).toBe(30_000);
      expect(defaultSafetyMargin(5000)).toBe(1000);
      expect(defaultSafetyMargin(1000)).toBe(500);
      expect(retryDeadline(T0, 86_400_000)).toBe(T0 + 86_400_000 - 60_000);
      expect(retryDeadline(T0, 10_000, 0)).toBe(T0 + 10_000);
    });

    it('honours an explicit safetyMarginMs', async () => {
      const clock = fakeClock();
      const { attempt } = scripted(clock, [retry('in_progress', 5000)], 'ok');
      await expect(
        retryWithinRetention(attempt, {
          key: 'k',
          retentionMs: 10_000,
          safetyMarginMs: 5000,
          ...clock,
          random: () => 0,
        }),
      ).rejects.toBeInstanceOf(RetentionWindowExceededError);
      const relaxed = scripted(clock, [retry('in_progress', 5000)], 'ok');
      await expect(
        retryWithinRetention(relaxed.attempt, {
          key: 'k',
          retentionMs: 10_000,
          safetyMarginMs: 4000,
          ...clock,
          random: () => 0,
        }),
      ).resolves.toBe('ok');
    });
  });

  it('throws RetriesExhaustedError after maxAttempts, with the key and the deadline to resume before', async () => {
    const clock = fakeClock();
    const failures = Array.from({ length: 3 }, () => retry());
    const { attempt } = scripted(clock, failures, 'never');
    const error = await retryWithinRetention(attempt, {
      key: 'order-42',
      retentionMs: 86_400_000,
      maxAttempts: 3,
      ...clock,
      random: () => 0,
    }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RetriesExhaustedError);
    expect(error).toMatchObject({
      code: 'idempotency_retries_exhausted',
      key: 'order-42',
      attempts: 3,
      firstAttemptAt: T0,
      deadline: T0 + 86_400_000 - 60_000,
    });
    expect((error as RetriesExhaustedError).lastError).toBe((failures[2] as { error: unknown }).error);
    expect((error as Error).message).toMatch(/^\[idem\] Gave up on Idempotency-Key "order-42" after 3 attempts/);
    expect(attempt).toHaveBeenCalledTimes(3);
  });

  it('makes 10 attempts by default', async () => {
    const clock = fakeClock();
    const { attempt } = scripted(
      clock,
      Array.from({ length: 20 }, () => retry()),
      'never',
    );
    await expect(
      retryWithinRetention(attempt, { key: 'k', retentionMs: 86_400_000, ...clock, random: () => 0 }),
    ).rejects.toBeInstanceOf(RetriesExhaustedError);
    expect(attempt).toHaveBeenCalledTimes(10);
  });

  it('passes a failure the attempt throws (400, 422, a stored outcome) through as it is, without another attempt', async () => {
    const clock = fakeClock();
    const unprocessable = new Error('422 idempotency_key_reused');
    const attempt = vi.fn(async (n: number): Promise<AttemptResult<string>> => {
      if (n === 1) return retry();
      throw unprocessable;
    });
    await expect(retryWithinRetention(attempt, { key: 'k', retentionMs: 86_400_000, ...clock })).rejects.toBe(
      unprocessable,
    );
    expect(attempt).toHaveBeenCalledTimes(2);
  });

  it('stops on abort: a wait in progress rejects with the signal’s reason and no further attempt starts', async () => {
    const controller = new AbortController();
    const attempt = vi.fn(async (): Promise<AttemptResult<string>> => retry('in_progress', 60_000));
    const running = retryWithinRetention(attempt, { key: 'k', retentionMs: 86_400_000, signal: controller.signal });
    await vi.waitFor(() => expect(attempt).toHaveBeenCalledTimes(1));
    const reason = new Error('user left the page');
    controller.abort(reason);
    await expect(running).rejects.toBe(reason);
    expect(attempt).toHaveBeenCalledTimes(1);
  });

  it('sends nothing when the signal is already aborted', async () => {
    const attempt = vi.fn(async (): Promise<AttemptResult<string>> => ({ done: 'ok' }));
    await expect(
      retryWithinRetention(attempt, { key: 'k', retentionMs: 86_400_000, signal: AbortSignal.abort() }),
    ).rejects.toMatchObject({ name: 'AbortError' });
    expect(attempt).not.toHaveBeenCalled();
  });

  it('refuses options that make no deadline', async () => {
    const attempt = async (): Promise<AttemptResult<string>> => ({ done: 'ok' });
    await expect(retryWithinRetention(attempt, { key: 'k', retentionMs: 0 })).rejects.toThrow(RangeError);
    await expect(retryWithinRetention(attempt, { key: 'k', retentionMs: 1000, safetyMarginMs: 1000 })).rejects.toThrow(
      /safetyMarginMs/,
    );
    await expect(retryWithinRetention(attempt, { key: 'k', retentionMs: 1000, maxAttempts: 0 })).rejects.toThrow(
      /maxAttempts/,
    );
  });
});

describe('parseRetryAfter', () => {
  it('reads delay-seconds and HTTP-dates, and nothing else', () => {
    expect(parseRetryAfter('1')).toBe(1000);
    expect(parseRetryAfter(' 120 ')).toBe(120_000);
    expect(parseRetryAfter(new Date(T0 + 5000).toUTCString(), () => T0)).toBe(5000);
    expect(parseRetryAfter(new Date(T0 - 5000).toUTCString(), () => T0)).toBe(0);
    expect(parseRetryAfter('soon')).toBeUndefined();
    expect(parseRetryAfter('-1')).toBeUndefined();
    expect(parseRetryAfter(null)).toBeUndefined();
  });
});

describe('newIdempotencyKey', () => {
  it('K1: is a fresh UUID v4 each time', () => {
    const keys = new Set(Array.from({ length: 100 }, newIdempotencyKey));
    expect(keys.size).toBe(100);
    for (const key of keys)
      expect(key).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  });

  it('K1: is a UUID v4 without crypto.randomUUID too (an insecure browser context)', () => {
    // An own property shadows Crypto.prototype.randomUUID until it is deleted again.
    Object.defineProperty(globalThis.crypto, 'randomUUID', { value: undefined, configurable: true });
    try {
      expect(globalThis.crypto.randomUUID).toBeUndefined();
      expect(newIdempotencyKey()).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    } finally {
      delete (globalThis.crypto as { randomUUID?: unknown }).randomUUID;
    }
    expect(typeof globalThis.crypto.randomUUID).toBe('function');
  });
});

describe('published retention (R4)', () => {
  const endpoint = (
    transport: 'trpc' | 'graphql',
    operation: string,
    retentionMs: number,
  ): EndpointPolicyDescription => ({
    endpoint: `${transport} ${operation}`,
    transport,
    operation,
    keySources: ['Idempotency-Key header'],
    required: true,
    retentionMs,
    leaseMs: 30_000,
    expiredReuse: 'execute',
    stored: 'the outcome',
    fingerprint: 'the input',
  });
  const policy = createPolicyDocument({
    documentationUrl: '/idempotency',
    endpoints: [
      endpoint('trpc', 'payments.create', 86_400_000),
      endpoint('graphql', 'Mutation.createPayment', 7_200_000),
      endpoint('trpc', 'orders.create', 1_800_000),
    ],
  });
  const serving = (body: unknown, status = 200) =>
    vi.fn(
      async (_url: string, _init?: RequestInit) =>
        new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json' } }),
    );

  it('R4: looks an operation up by transport and name, asking for JSON', async () => {
    const fetch = serving(policy);
    const lookup = await loadRetentionPolicy('https://api.test/idempotency', { fetch });
    expect(lookup('trpc', 'payments.create')).toBe(86_400_000);
    expect(lookup('graphql', 'Mutation.createPayment')).toBe(7_200_000);
    expect(fetch).toHaveBeenCalledExactlyOnceWith('https://api.test/idempotency', {
      method: 'GET',
      headers: { accept: 'application/json' },
    });
  });

  it('R4: gives an operation the policy does not list the shortest published retention', async () => {
    const lookup = await loadRetentionPolicy('https://api.test/idempotency', { fetch: serving(policy) });
    expect(lookup('trpc', 'refunds.create')).toBe(1_800_000);
    expect(lookup('graphql', 'Mutation.createOrder')).toBe(1_800_000);
  });

  it('fetches the policy once per URL, however many callers ask at once', async () => {
    const fetch = serving(policy);
    await Promise.all([
      loadRetentionPolicy('https://once.test/idempotency', { fetch }),
      loadRetentionPolicy('https://once.test/idempotency', { fetch }),
    ]);
    await loadRetentionPolicy(new URL('https://once.test/idempotency'), { fetch });
    expect(fetch).toHaveBeenCalledTimes(1);
    await loadRetentionPolicy('https://twice.test/idempotency', { fetch });
    expect(fetch).toHaveBeenCalledTimes(2);
  });

  it('does not cache a failed load: the next call fetches again', async () => {
    const fetch = vi.fn(async (_url: string) => new Response('down', { status: 503 }));
    await expect(loadRetentionPolicy('https://flaky.test/idempotency', { fetch })).rejects.toThrow(
      '[idem] could not read the idempotency policy at https://flaky.test/idempotency: it answered 503',
    );
    fetch.mockResolvedValueOnce(new Response(JSON.stringify(policy)));
    const lookup = await loadRetentionPolicy('https://flaky.test/idempotency', { fetch });
    expect(lookup('trpc', 'payments.create')).toBe(86_400_000);
    expect(fetch).toHaveBeenCalledTimes(2);
  });

  it('refuses a document that is not an idem policy', async () => {
    await expect(
      loadRetentionPolicy('https://html.test/idempotency', { fetch: serving({ title: 'hello' }) }),
    ).rejects.toThrow('is not an idem policy document');
    await expect(
      loadRetentionPolicy('https://bad.test/idempotency', {
        fetch: serving({ endpoints: [{ transport: 'trpc', operation: 'x', retentionMs: '24h' }] }),
      }),
    ).rejects.toThrow('is not an idem policy document');
  });

  describe('createRetentionResolver', () => {
    it('needs exactly one of retention and policyUrl', () => {
      expect(() => createRetentionResolver({}, 'idempotencyLink')).toThrow(
        /\[idem\] idempotencyLink needs to know how long the server keeps keys/,
      );
      expect(() => createRetentionResolver({ retention: '24h', policyUrl: '/idempotency' }, 'idempotencyLink')).toThrow(
        /exactly one of them/,
      );
    });

    it('resolves a configured retention without fetching anything', async () => {
      const fetch = serving(policy);
      await expect(
        createRetentionResolver({ retention: '30m', fetch }, 'test')('trpc', ['payments.create']),
      ).resolves.toBe(1_800_000);
      expect(fetch).not.toHaveBeenCalled();
    });

    it('R4: takes the shortest retention among the operations of one request', async () => {
      const resolve = createRetentionResolver(
        { policyUrl: 'https://resolver.test/idempotency', fetch: serving(policy) },
        'test',
      );
      await expect(resolve('trpc', ['payments.create'])).resolves.toBe(86_400_000);
      await expect(resolve('graphql', ['Mutation.createPayment'])).resolves.toBe(7_200_000);
      await expect(resolve('trpc', ['payments.create', 'orders.create'])).resolves.toBe(1_800_000);
      await expect(resolve('graphql', [])).resolves.toBe(1_800_000);
    });

    it('fails when the policy lists no endpoint', async () => {
      const resolve = createRetentionResolver(
        { policyUrl: 'https://empty.test/idempotency', fetch: serving({ endpoints: [] }) },
        'test',
      );
      await expect(resolve('trpc', ['payments.create'])).rejects.toThrow('lists no endpoint');
    });
  });
});
