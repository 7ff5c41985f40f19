/**
 * E4, "the handler did not start", as one value: `notStartedAnswer` returned by a handler,
 * `notStarted(ctx, error)` said by a resolver, and the deprecated `HandlerNotStartedError` of direct
 * engine callers. Rule ids refer to ../../../docs/spec.md.
 */
import { describe, expect, it } from 'vitest';
import { createEngine, formatScope, HandlerNotStartedError, MemoryStore, notStarted } from '@idem/core';
import { claimFields, notStartedAnswer, outcomeCodec, saidNotStarted } from '@idem/core/adapter';

const scope = formatScope('payments.create', 'acct_1');

describe('E4: not started, as a value', () => {
  it('a handler that returns notStartedAnswer releases the claim, stores nothing, and its answer comes back; the same key then runs', async () => {
    const store = new MemoryStore();
    const engine = createEngine({ store });
    const refused = await engine.execute({ scope, key: 'k', fingerprint: null }, () => notStartedAnswer(429));
    expect(refused).toEqual({ ok: false, replayed: false, notStarted: true, answer: 429, generation: 1 });
    expect((await store.get(scope, 'k'))?.state).toBe('released');
    expect(await engine.execute({ scope, key: 'k', fingerprint: null }, () => 'paid')).toMatchObject({
      ok: true,
      value: 'paid',
      replayed: false,
    });
  });

  it('notStarted(ctx, error) marks the claim the context carries and returns the error; without a claim it only returns it', async () => {
    const engine = createEngine({ store: new MemoryStore() });
    const denied = new Error('rate limited');
    await engine.execute({ scope, key: 'k', fingerprint: null }, (claim) => {
      const ctx = { user: 'alice', ...claimFields(claim) };
      expect(saidNotStarted(claim)).toBe(false);
      expect(notStarted(ctx, denied)).toBe(denied);
      expect(saidNotStarted(claim)).toBe(true);
      return 'done';
    });
    expect(notStarted({ user: 'alice' }, denied)).toBe(denied);
    expect(notStarted(undefined, denied)).toBe(denied);
  });

  it('deprecated: a HandlerNotStartedError thrown by a direct engine caller still releases the claim and rethrows its cause', async () => {
    const store = new MemoryStore();
    const engine = createEngine({ store });
    const denied = new Error('rate limited');
    await expect(
      engine.execute({ scope, key: 'k', fingerprint: null }, () => {
        throw new HandlerNotStartedError(denied);
      }),
    ).rejects.toBe(denied);
    expect((await store.get(scope, 'k'))?.state).toBe('released');
  });
});

describe('E2/E4: an outcome codec', () => {
  const codec = outcomeCodec<{ status: number; text: string }, string>({
    stringify: (value) => JSON.stringify(value),
    parse: (text) => (JSON.parse(text) as { text: string }).text,
    statusOf: (value) => value.status,
  });

  it('stores a value under its own status and replays what its parse gives back, typed as the stored side', async () => {
    const engine = createEngine({ store: new MemoryStore() });
    const request = { scope, key: 'k', fingerprint: null, codec };
    const first = await engine.execute(request, () => ({ status: 201, text: 'created' }));
    expect(first).toMatchObject({ ok: true, replayed: false, value: { status: 201, text: 'created' } });
    const replay = await engine.execute(request, () => ({ status: 500, text: 'not run' }));
    expect(replay).toMatchObject({ ok: true, replayed: true, value: 'created' });
    const status = (await engine.store.get(scope, 'k'))?.outcome?.status;
    expect(status).toBe(201);
  });

  it('encodes a value it cannot write as the 500 that says the request was executed', () => {
    const cyclic: { status: number; text: string; self?: unknown } = { status: 200, text: 'x' };
    cyclic.self = cyclic;
    const encoded = codec.encode({ ok: true, value: cyclic });
    expect(encoded).toMatchObject({ kind: 'error', status: 500 });
    expect(JSON.parse(encoded.body)).toMatchObject({
      name: 'IdempotencyOutcomeNotStored',
      code: 'INTERNAL_SERVER_ERROR',
    });
  });
});
