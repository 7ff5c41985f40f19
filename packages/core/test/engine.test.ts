import { describe, expect, it, vi } from 'vitest';
import {
  createEngine,
  deriveKey,
  formatScope,
  FingerprintMismatchError,
  KeyExpiredError,
  MemoryStore,
  ReplayedError,
  RequestInProgressError,
  StoreUnavailableError,
  type IdempotencyEvent,
} from '@idem/core';
import { notStartedAnswer } from '@idem/core/adapter';
import { createDrizzleStore, migrate } from '@idem/drizzle';
import { openSqliteTarget } from '../../drizzle/test/sqlite-target.ts';
import { unreachableStores } from '../../drizzle/test/unreachable-stores.ts';

/** A memory store on a clock the test moves. */
function clockedStore() {
  let now = Date.parse('2026-11-30T10:00:00.000Z');
  const store = new MemoryStore({ now: () => now });
  return { store, advance: (ms: number) => (now += ms) };
}

const scope = formatScope('payments.create', 'acct_1');

function recorder() {
  const events: IdempotencyEvent[] = [];
  return { events, onEvent: (event: IdempotencyEvent) => events.push(event), types: () => events.map((e) => e.type) };
}

describe('engine', () => {
  it('S1: formats the scope as <principal>/<operation> with the principal encoded', () => {
    expect(formatScope('payments.create', 'acct/1 x')).toBe('acct%2F1%20x/payments.create');
  });

  it('E2: replays the stored result and does not run the handler again; emits claimed, completed, replayed', async () => {
    const { events, onEvent, types } = recorder();
    const engine = createEngine({ store: new MemoryStore(), onEvent });
    const handler = vi.fn(async () => ({ id: 'ch_1', amount: 10 }));
    const first = await engine.execute({ scope, key: 'k1', fingerprint: 'f' }, handler);
    const second = await engine.execute({ scope, key: 'k1', fingerprint: 'f' }, handler);
    expect(first).toEqual({ ok: true, value: { id: 'ch_1', amount: 10 }, replayed: false, generation: 1 });
    expect(second).toEqual({ ok: true, value: { id: 'ch_1', amount: 10 }, replayed: true, generation: 1 });
    expect(handler).toHaveBeenCalledTimes(1);
    expect(types()).toEqual(['claimed', 'completed', 'replayed']);
    expect(events[2]).toMatchObject({ scope, key: 'k1', status: 200, generation: 1 });
  });

  it('E4: stores a thrown error and replays its code, message and status', async () => {
    const engine = createEngine({ store: new MemoryStore() });
    const boom = Object.assign(new Error('channel exploded'), { code: 'CHANNEL_DOWN', status: 502 });
    const handler = vi.fn(async () => {
      throw boom;
    });
    const first = await engine.execute({ scope, key: 'k', fingerprint: 'f' }, handler);
    const second = await engine.execute({ scope, key: 'k', fingerprint: 'f' }, handler);
    expect(first).toMatchObject({ ok: false, error: boom, replayed: false });
    expect(second.ok).toBe(false);
    const replayed = (second as { error: unknown }).error;
    expect(replayed).toBeInstanceOf(ReplayedError);
    expect(replayed).toMatchObject({ message: 'channel exploded', code: 'CHANNEL_DOWN', status: 502 });
    expect(second.replayed).toBe(true);
    expect(handler).toHaveBeenCalledTimes(1);
  });

  it('E4: replays an unexpected exception as a 500 INTERNAL_SERVER_ERROR', async () => {
    const store = new MemoryStore();
    const engine = createEngine({ store });
    await engine.execute({ scope, key: 'k', fingerprint: 'f' }, () => {
      throw new TypeError('undefined is not a function');
    });
    expect((await store.get(scope, 'k'))?.outcome).toMatchObject({ kind: 'error', status: 500 });
    const replay = await engine.execute({ scope, key: 'k', fingerprint: 'f' }, () => 'never');
    expect(replay).toMatchObject({
      ok: false,
      replayed: true,
      error: { code: 'INTERNAL_SERVER_ERROR', status: 500, message: 'undefined is not a function' },
    });
  });

  it('E2: replays an undefined result as undefined', async () => {
    const engine = createEngine({ store: new MemoryStore() });
    await engine.execute({ scope, key: 'k', fingerprint: null }, () => undefined);
    expect(await engine.execute({ scope, key: 'k', fingerprint: null }, () => 1)).toMatchObject({
      ok: true,
      value: undefined,
      replayed: true,
    });
  });

  it('E3: answers 409 with Retry-After while the first request runs, and stores nothing for it', async () => {
    const { onEvent, types } = recorder();
    const engine = createEngine({ store: new MemoryStore(), onEvent, conflictRetryAfter: 3 });
    let finish!: (value: string) => void;
    const first = engine.execute(
      { scope, key: 'k', fingerprint: 'f' },
      () => new Promise<string>((resolve) => (finish = resolve)),
    );
    await vi.waitFor(() => expect(finish).toBeTypeOf('function'));
    const error = await engine.execute({ scope, key: 'k', fingerprint: 'f' }, () => 'second').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RequestInProgressError);
    expect(error).toMatchObject({ status: 409, retryAfter: 3, code: 'idempotency_request_in_progress' });
    expect((error as RequestInProgressError).headers()).toEqual({ 'Retry-After': '3' });
    finish('first');
    expect(await first).toMatchObject({ value: 'first' });
    expect(types()).toEqual(['claimed', 'conflict', 'completed']);
  });

  it('F3: answers 422 for another payload, runs nothing and leaves the record unchanged', async () => {
    const store = new MemoryStore();
    const { onEvent, types } = recorder();
    const engine = createEngine({ store, onEvent });
    await engine.execute({ scope, key: 'k', fingerprint: 'f1' }, () => 'one');
    const before = await store.get(scope, 'k');
    const handler = vi.fn(() => 'two');
    await expect(engine.execute({ scope, key: 'k', fingerprint: 'f2' }, handler)).rejects.toBeInstanceOf(
      FingerprintMismatchError,
    );
    expect(handler).not.toHaveBeenCalled();
    expect(await store.get(scope, 'k')).toEqual(before);
    expect(types()).toContain('mismatch');
  });

  it('F2: never answers 422 when the endpoint has no fingerprint', async () => {
    const engine = createEngine({ store: new MemoryStore() });
    await engine.execute({ scope, key: 'k', fingerprint: null }, () => 'one');
    expect(await engine.execute({ scope, key: 'k', fingerprint: null }, () => 'two')).toMatchObject({
      value: 'one',
      replayed: true,
    });
  });

  describe.each(unreachableStores)('E5 on a real store that cannot reach its database ($name)', ({ open }) => {
    it('fails closed with a typed 503 and Retry-After; the handler never runs', async () => {
      const unreachable = await open();
      try {
        const { events, onEvent } = recorder();
        const engine = createEngine({ store: unreachable.store, onEvent, unavailableRetryAfter: 5 });
        const handler = vi.fn(() => 'charged');
        const error = await engine.execute({ scope, key: 'k', fingerprint: 'f' }, handler).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(StoreUnavailableError);
        expect(error).toMatchObject({ status: 503, retryAfter: 5, code: 'idempotency_store_unavailable' });
        expect(handler).not.toHaveBeenCalled();
        expect(events).toEqual([
          expect.objectContaining({ type: 'storeError', storeOperation: 'claim', willRetry: false }),
        ]);
      } finally {
        await unreachable.close();
      }
    });
  });

  it('E5/E4: nothing is stored while SQLite is unreachable: over a new connection the same key executes', async () => {
    const unreachable = await unreachableStores[0]!.open();
    try {
      const handler = vi.fn(() => 'charged');
      await expect(
        createEngine({ store: unreachable.store }).execute({ scope, key: 'k', fingerprint: 'f' }, handler),
      ).rejects.toBeInstanceOf(StoreUnavailableError);
      const reconnected = unreachable.reconnect!();
      expect(await reconnected.get(scope, 'k')).toBeNull();
      expect(
        await createEngine({ store: reconnected }).execute({ scope, key: 'k', fingerprint: 'f' }, handler),
      ).toMatchObject({ value: 'charged', replayed: false });
      expect(handler).toHaveBeenCalledTimes(1);
    } finally {
      await unreachable.close();
    }
  });

  it('E7: when the database refuses to store the outcome, the client gets the real outcome, and the write is retried until it lands', async () => {
    const target = await openSqliteTarget();
    try {
      await migrate(target.db);
      const store = createDrizzleStore(target.db);
      // A real refusal by the database (as a full disk would answer), lifted after two failed writes.
      target.client.exec(
        "CREATE TRIGGER refuse_outcomes BEFORE UPDATE OF state ON idem_keys WHEN NEW.state = 'completed' BEGIN SELECT RAISE(ABORT, 'disk full'); END",
      );
      const { types, onEvent } = recorder();
      let refused = 0;
      const engine = createEngine({
        store,
        onEvent: (event) => {
          onEvent(event);
          if (event.type === 'storeError' && ++refused === 2) target.client.exec('DROP TRIGGER refuse_outcomes');
        },
      });
      const handler = vi.fn(() => ({ charged: true }));
      expect(await engine.execute({ scope, key: 'k', fingerprint: 'f' }, handler)).toMatchObject({
        ok: true,
        value: { charged: true },
        replayed: false,
      });
      expect((await store.get(scope, 'k'))?.state).toBe('processing');
      await expect(engine.execute({ scope, key: 'k', fingerprint: 'f' }, handler)).rejects.toBeInstanceOf(
        RequestInProgressError,
      );
      await engine.drain();
      expect((await store.get(scope, 'k'))?.state).toBe('completed');
      expect(await engine.execute({ scope, key: 'k', fingerprint: 'f' }, handler)).toMatchObject({
        value: { charged: true },
        replayed: true,
      });
      expect(handler).toHaveBeenCalledTimes(1);
      expect(types().filter((t) => t === 'storeError')).toHaveLength(2);
    } finally {
      await target.close();
    }
  });

  it('E4: releases the claim when the handler reports it did not start, so the same key can run later', async () => {
    const store = new MemoryStore();
    const { onEvent, types } = recorder();
    const engine = createEngine({ store, onEvent });
    const denied = new Error('rate limited');
    const refused = await engine.execute({ scope, key: 'k', fingerprint: 'f1' }, () => notStartedAnswer(denied));
    expect(refused).toMatchObject({ notStarted: true, answer: denied, replayed: false });
    expect((await store.get(scope, 'k'))?.state).toBe('released');
    expect(await engine.execute({ scope, key: 'k', fingerprint: 'f2' }, () => 'ok')).toMatchObject({
      value: 'ok',
      replayed: false,
    });
    expect(types()).toEqual(['claimed', 'released', 'claimed', 'completed']);
  });

  it('E6: after the lease a retry takes over with a new fencing token; the stale owner cannot overwrite its outcome', async () => {
    const { store, advance } = clockedStore();
    const { events, onEvent } = recorder();
    const engine = createEngine({ store, onEvent, lease: '10s' });
    let finishStale!: (value: string) => void;
    const stale = engine.execute(
      { scope, key: 'k', fingerprint: 'f' },
      () => new Promise<string>((resolve) => (finishStale = resolve)),
    );
    await vi.waitFor(() => expect(finishStale).toBeTypeOf('function'));
    advance(5_000);
    await expect(engine.execute({ scope, key: 'k', fingerprint: 'f' }, () => 'x')).rejects.toBeInstanceOf(
      RequestInProgressError,
    );
    advance(6_000);
    const fresh = await engine.execute({ scope, key: 'k', fingerprint: 'f' }, () => 'new owner');
    expect(fresh).toMatchObject({ value: 'new owner', replayed: false });
    finishStale('stale owner');
    expect(await stale).toMatchObject({ value: 'stale owner' });
    expect((await store.get(scope, 'k'))?.outcome?.body).toBe('"new owner"');
    expect(events.find((e) => e.type === 'staleTakeover')).toMatchObject({
      scope,
      key: 'k',
      takeovers: 1,
      generation: 1,
    });
    expect(events.find((e) => e.type === 'fenced')).toMatchObject({ key: 'k' });
  });

  it('R2: past retention a reuse runs as new and emits expiredKeyReused with the earlier timestamps and status', async () => {
    const { store, advance } = clockedStore();
    const { events, onEvent } = recorder();
    const engine = createEngine({ store, onEvent, retention: '2s' });
    const handler = vi.fn(() => 'charge');
    await engine.execute({ scope, key: 'k', fingerprint: 'f' }, handler);
    advance(1_000);
    expect(await engine.execute({ scope, key: 'k', fingerprint: 'f' }, handler)).toMatchObject({ replayed: true });
    advance(1_500);
    expect(await engine.execute({ scope, key: 'k', fingerprint: 'f' }, handler)).toMatchObject({
      replayed: false,
      generation: 2,
    });
    expect(handler).toHaveBeenCalledTimes(2);
    const reused = events.find((e) => e.type === 'expiredKeyReused');
    expect(reused).toMatchObject({
      generation: 2,
      previous: {
        generation: 1,
        status: 200,
        outcomeKind: 'success',
        firstSeenAt: new Date('2026-11-30T10:00:00.000Z'),
        expiresAt: new Date('2026-11-30T10:00:02.000Z'),
      },
    });
    expect((await store.timeline(scope, 'k')).map((g) => [g.generation, g.status])).toEqual([
      [1, 200],
      [2, 200],
    ]);
  });

  it('R2: with expiredReuse reject, a reuse past retention answers 422 idempotency_key_expired and runs nothing', async () => {
    const { store, advance } = clockedStore();
    const engine = createEngine({ store, retention: '2s', expiredReuse: 'reject' });
    const handler = vi.fn(() => 'charge');
    await engine.execute({ scope, key: 'k', fingerprint: 'f' }, handler);
    advance(3_000);
    const error = await engine.execute({ scope, key: 'k', fingerprint: 'f' }, handler).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(KeyExpiredError);
    expect(error).toMatchObject({ status: 422, code: 'idempotency_key_expired', previous: { status: 200 } });
    expect(handler).toHaveBeenCalledTimes(1);
  });

  it('E4: a result the serializer cannot write is stored as a 500 instead of running twice', async () => {
    const store = new MemoryStore();
    const engine = createEngine({ store });
    const handler = vi.fn(() => ({ n: 1n }));
    expect(await engine.execute({ scope, key: 'k', fingerprint: 'f' }, handler)).toMatchObject({
      ok: true,
      value: { n: 1n },
    });
    expect(await engine.execute({ scope, key: 'k', fingerprint: 'f' }, handler)).toMatchObject({
      ok: false,
      replayed: true,
      error: { status: 500 },
    });
    expect(handler).toHaveBeenCalledTimes(1);
  });

  it('E4: an outcome over maxStoredBytes reaches its client, and replays as a 500 that says it was executed', async () => {
    const store = new MemoryStore();
    const engine = createEngine({ store, maxStoredBytes: 64 });
    const big = { blob: 'x'.repeat(100) };
    const handler = vi.fn(() => big);
    expect(await engine.execute({ scope, key: 'k', fingerprint: 'f' }, handler)).toMatchObject({
      ok: true,
      value: big,
      replayed: false,
    });
    const replay = await engine.execute({ scope, key: 'k', fingerprint: 'f' }, handler);
    expect(replay).toMatchObject({
      ok: false,
      replayed: true,
      error: {
        status: 500,
        code: 'INTERNAL_SERVER_ERROR',
        data: {
          executed: true,
          outcomeKind: 'success',
          status: 200,
          bytes: JSON.stringify(big).length,
          maxStoredBytes: 64,
        },
      },
    });
    expect((replay as { error: Error }).error.message).toMatch(
      /was executed \(outcome: success, status 200\).*Do not retry/,
    );
    expect(JSON.stringify(await store.get(scope, 'k'))).not.toContain('xxxx');
    expect(handler).toHaveBeenCalledTimes(1);
  });

  it('E6: derives the same downstream key across a lease takeover, and a new one for a new generation (R2)', async () => {
    const { store, advance } = clockedStore();
    const engine = createEngine({ store, lease: '10s', retention: '1m' });
    const seen: string[] = [];
    let finishStale!: () => void;
    const stale = engine.execute({ scope, key: 'k', fingerprint: 'f' }, (claim) => {
      seen.push(claim.deriveKey('channel'));
      return new Promise<void>((resolve) => (finishStale = resolve));
    });
    await vi.waitFor(() => expect(finishStale).toBeTypeOf('function'));
    advance(11_000);
    await engine.execute(
      { scope, key: 'k', fingerprint: 'f' },
      (claim) => void seen.push(claim.deriveKey('channel'), claim.deriveKey('email')),
    );
    finishStale();
    await stale;
    advance(60_000);
    await engine.execute({ scope, key: 'k', fingerprint: 'f' }, (claim) => void seen.push(claim.deriveKey('channel')));
    const [first, takeover, email, nextGeneration] = seen;
    expect(first).toMatch(/^"idem-[A-Za-z0-9_-]{32}"$/);
    expect(takeover).toBe(first);
    expect(email).not.toBe(first);
    expect(nextGeneration).not.toBe(first);
    expect(deriveKey({ scope, key: 'k', generation: 1 }, 'channel')).toBe(first);
    expect(deriveKey({ scope: formatScope('payments.create', 'acct_2'), key: 'k', generation: 1 }, 'channel')).not.toBe(
      first,
    );
  });

  it('ignores exceptions thrown by the event hook', async () => {
    const engine = createEngine({
      store: new MemoryStore(),
      onEvent: () => {
        throw new Error('logger down');
      },
    });
    expect(await engine.execute({ scope, key: 'k', fingerprint: 'f' }, () => 1)).toMatchObject({ value: 1 });
  });

  it('X1: renders errors as problem+json with the configured documentation URL as type', () => {
    expect(new RequestInProgressError(2).toProblem('https://api.example.com/idempotency')).toEqual({
      type: 'https://api.example.com/idempotency#idempotency_request_in_progress',
      title: 'Server processing previous request',
      status: 409,
      detail: expect.stringContaining('still being processed'),
      code: 'idempotency_request_in_progress',
      retryAfter: 2,
    });
    expect(new FingerprintMismatchError().toProblem()).toMatchObject({
      type: '/idempotency#idempotency_key_reused',
      status: 422,
    });
  });
});
