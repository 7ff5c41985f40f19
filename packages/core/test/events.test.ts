/**
 * The events, fit for metrics and for correlation: every event names its scope's operation and
 * principal beside the scope (S1), the request it answers (`requestId`), and `completed` how long
 * the handler ran. Never the payload or a stored body (K5).
 */
import fc from 'fast-check';
import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  combineEventHandlers,
  createEngine,
  FingerprintMismatchError,
  formatScope,
  MemoryStore,
  RequestInProgressError,
  type IdempotencyEvent,
  type IdempotencyStore,
} from '@idem/core';
import { notStartedAnswer } from '@idem/core/adapter';

function recorder() {
  const events: IdempotencyEvent[] = [];
  return { events, onEvent: (event: IdempotencyEvent) => void events.push(event) };
}

/** A memory store on a clock the test moves. */
function clockedStore() {
  let now = Date.parse('2026-12-01T10:00:00.000Z');
  return { store: new MemoryStore({ now: () => now }), advance: (ms: number) => (now += ms) };
}

/** `real`, with some of its calls replaced. */
function overriding(real: MemoryStore, overrides: Partial<IdempotencyStore>): IdempotencyStore {
  return {
    claim: (request) => real.claim(request),
    complete: (args) => real.complete(args),
    saveStep: (args) => real.saveStep(args),
    renew: (args) => real.renew(args),
    countWait: (args) => real.countWait(args),
    release: (args) => real.release(args),
    get: (scope, key) => real.get(scope, key),
    timeline: (scope, key) => real.timeline(scope, key),
    sweep: (options) => real.sweep(options),
    purge: (options) => real.purge(options),
    ping: () => real.ping(),
    ...overrides,
  };
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe('events: operation and principal beside the scope (S1)', () => {
  it('S1: every event of a fresh call, a replay, a conflict and a mismatch carries the parts the request gave', async () => {
    const { events, onEvent } = recorder();
    const engine = createEngine({ store: new MemoryStore(), onEvent });
    const parts = { operation: 'payments.create', principal: 'acct/1 ü' };
    const request = { ...parts, scope: formatScope(parts.operation, parts.principal), key: 'k-1' };
    let finish!: (value: string) => void;
    const first = engine.execute({ ...request, fingerprint: 'f' }, () => new Promise<string>((r) => (finish = r)));
    await vi.waitFor(() => expect(finish).toBeTypeOf('function'));
    await expect(engine.execute({ ...request, fingerprint: 'f' }, () => 'again')).rejects.toBeInstanceOf(
      RequestInProgressError,
    );
    finish('charged');
    await first;
    await engine.execute({ ...request, fingerprint: 'f' }, () => 'again');
    await expect(engine.execute({ ...request, fingerprint: 'other' }, () => 'again')).rejects.toBeInstanceOf(
      FingerprintMismatchError,
    );
    expect(events.map((e) => e.type)).toEqual(['claimed', 'conflict', 'completed', 'replayed', 'mismatch']);
    for (const event of events) expect(event).toMatchObject({ ...parts, scope: request.scope, key: 'k-1' });
  });

  it('S1: without the parts, any principal and operation are read back from a scope formatScope made', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.string({ unit: 'binary', minLength: 0, maxLength: 12 }),
        fc.string({ minLength: 1, maxLength: 24 }),
        async (principal, operation) => {
          const { events, onEvent } = recorder();
          const engine = createEngine({ store: new MemoryStore(), onEvent });
          await engine.execute({ scope: formatScope(operation, principal), key: 'k', fingerprint: null }, () => 1);
          expect(events.map(({ operation, principal }) => ({ operation, principal }))).toEqual([
            { operation, principal },
            { operation, principal },
          ]);
        },
      ),
      { numRuns: 200 },
    );
  });

  it('S1: a scope formatScope did not make is its own operation, with principal ""', async () => {
    const { events, onEvent } = recorder();
    const engine = createEngine({ store: new MemoryStore(), onEvent });
    await engine.execute({ scope: 'sweep|acct_1', key: 'k', fingerprint: null }, () => 1);
    await engine.execute({ scope: '%E0%A4%A/pay', key: 'k', fingerprint: null }, () => 1);
    expect(events.map(({ operation, principal }) => ({ operation, principal }))).toEqual([
      { operation: 'sweep|acct_1', principal: '' },
      { operation: 'sweep|acct_1', principal: '' },
      { operation: '%E0%A4%A/pay', principal: '' },
      { operation: '%E0%A4%A/pay', principal: '' },
    ]);
  });

  it('S1: parts that do not make the scope, or only one of them, are refused with a TypeError before anything runs', async () => {
    const store = new MemoryStore();
    const engine = createEngine({ store });
    const handler = vi.fn(() => 1);
    await expect(
      engine.execute(
        { scope: formatScope('pay', 'acct_1'), operation: 'pay', principal: 'acct_2', key: 'k', fingerprint: null },
        handler,
      ),
    ).rejects.toThrow(/^\[idem\] the request's `operation` and `principal` do not make its `scope`/);
    await expect(
      engine.execute({ scope: formatScope('pay', 'acct_1'), operation: 'pay', key: 'k', fingerprint: null }, handler),
    ).rejects.toThrow(new TypeError('[idem] a request gives both `operation` and `principal`, or neither'));
    expect(handler).not.toHaveBeenCalled();
    expect(await store.get(formatScope('pay', 'acct_1'), 'k')).toBeNull();
  });
});

describe('events: which request they answer (requestId)', () => {
  const scope = formatScope('payments.create', 'acct_1');

  it('claimed and completed of one call share a requestId; the replay, the conflict and the mismatch each name their own', async () => {
    const { events, onEvent } = recorder();
    const engine = createEngine({ store: new MemoryStore(), onEvent });
    let finish!: (value: string) => void;
    const first = engine.execute({ scope, key: 'k', fingerprint: 'f' }, () => new Promise<string>((r) => (finish = r)));
    await vi.waitFor(() => expect(finish).toBeTypeOf('function'));
    await expect(engine.execute({ scope, key: 'k', fingerprint: 'f' }, () => 'x')).rejects.toBeInstanceOf(
      RequestInProgressError,
    );
    finish('done');
    await first;
    await engine.execute({ scope, key: 'k', fingerprint: 'f' }, () => 'x');
    await engine.execute({ scope, key: 'k', fingerprint: 'f', requestId: 'req-from-my-logs' }, () => 'x');
    await expect(engine.execute({ scope, key: 'k', fingerprint: 'g' }, () => 'x')).rejects.toBeInstanceOf(
      FingerprintMismatchError,
    );
    const [claimed, conflict, completed, replayed, mine, mismatch] = events;
    expect(events.map((e) => e.type)).toEqual(['claimed', 'conflict', 'completed', 'replayed', 'replayed', 'mismatch']);
    expect(completed!.requestId).toBe(claimed!.requestId);
    expect(mine!.requestId).toBe('req-from-my-logs');
    const ids = [claimed, conflict, replayed, mine, mismatch].map((e) => e!.requestId);
    expect(new Set(ids).size).toBe(ids.length);
    // The generation each answer is about: the one running (409), replayed (E2) or differing (F3).
    expect(conflict).toMatchObject({ type: 'conflict', generation: 1 });
    expect(replayed).toMatchObject({ type: 'replayed', generation: 1 });
    expect(mismatch).toMatchObject({ type: 'mismatch', generation: 1 });
  });

  it('storeError names its store call (storeOperation), the request and the generation it claimed; operation stays the endpoint', async () => {
    const { events, onEvent } = recorder();
    const real = new MemoryStore();
    const failing = overriding(real, {
      release: async () => {
        throw new Error('connection reset');
      },
    });
    const engine = createEngine({ store: failing, onEvent });
    expect(
      await engine.execute({ scope, key: 'k', fingerprint: null, requestId: 'r-1' }, () =>
        notStartedAnswer('rate limited'),
      ),
    ).toMatchObject({ notStarted: true, answer: 'rate limited' });
    expect(events.map((e) => e.type)).toEqual(['claimed', 'storeError']);
    expect(events[1]).toMatchObject({
      type: 'storeError',
      storeOperation: 'release',
      operation: 'payments.create',
      principal: 'acct_1',
      requestId: 'r-1',
      generation: 1,
      willRetry: false,
    });
  });

  it('K5: no event carries the payload or the stored body', async () => {
    const { events, onEvent } = recorder();
    const engine = createEngine({ store: new MemoryStore(), onEvent });
    const secret = 'card 4242 4242 4242 4242';
    await engine.execute({ scope, key: 'k', fingerprint: 'f' }, () => ({ receipt: secret }));
    await engine.execute({ scope, key: 'k', fingerprint: 'f' }, () => ({ receipt: secret }));
    expect(events).toHaveLength(3);
    for (const event of events) expect(JSON.stringify(event)).not.toContain('4242');
  });
});

describe('events: completed.durationMs', () => {
  it("is the handler's run, from its call until its promise settles: not the claim, not the outcome's write", async () => {
    let clock = 1_000;
    vi.spyOn(performance, 'now').mockImplementation(() => clock);
    const { store } = clockedStore();
    // The store's calls take time too, which durationMs must leave out.
    const slow = overriding(store, {
      claim: async (request) => {
        clock += 5_000;
        return store.claim(request);
      },
      complete: async (args) => {
        clock += 7_000;
        return store.complete(args);
      },
    });
    const { events, onEvent } = recorder();
    const engine = createEngine({ store: slow, onEvent });
    await engine.execute({ scope: 'acct_1/pay', key: 'ok', fingerprint: null }, async () => {
      clock += 125.5;
      await Promise.resolve();
      clock += 100;
      return 'charged';
    });
    await engine.execute({ scope: 'acct_1/pay', key: 'thrown', fingerprint: null }, async () => {
      clock += 40;
      throw new Error('declined');
    });
    const completed = events.filter((e) => e.type === 'completed');
    expect(completed.map((e) => [e.key, e.outcomeKind, e.durationMs])).toEqual([
      ['ok', 'success', 225.5],
      ['thrown', 'error', 40],
    ]);
  });
});

describe('combineEventHandlers', () => {
  it('gives every event to each hook in order; one that throws does not keep it from the next; undefined is skipped', async () => {
    const seen: string[] = [];
    const onEvent = combineEventHandlers(
      (event) => {
        seen.push(`a:${event.type}`);
        throw new Error('broken logger');
      },
      undefined,
      (event) => void seen.push(`b:${event.type}`),
    );
    const engine = createEngine({ store: new MemoryStore(), onEvent });
    expect(await engine.execute({ scope: 'acct_1/pay', key: 'k', fingerprint: null }, () => 1)).toMatchObject({
      ok: true,
      value: 1,
    });
    expect(seen).toEqual(['a:claimed', 'b:claimed', 'a:completed', 'b:completed']);
  });
});
