/**
 * Success values that carry their own status and size (an HTTP response, `@idem/fetch`): the
 * record keeps the value's status (A1), and a value known to be too large without serializing it
 * is stored as any outcome over `maxStoredBytes` is (E4).
 */
import { describe, expect, it, vi } from 'vitest';
import { createEngine, formatScope, MemoryStore, type IdempotencyEvent, type OutcomeSerializer } from '@idem/core';
import { OutcomeTooLargeError } from '@idem/core/adapter';

const scope = formatScope('POST /orders', 'acct_1');

interface Answer {
  status: number;
  body: string;
}

/** Serializes an answer, or refuses one whose body is longer than `limit` as too large. */
const answers = (limit: number): OutcomeSerializer => ({
  stringify(value: Answer) {
    if (value.body.length > limit) throw new OutcomeTooLargeError(limit + 1, value.status);
    return JSON.stringify(value);
  },
  parse: (text) => JSON.parse(text),
});

describe('engine: success values with their own status and size', () => {
  it('A1: the record, its completed event and its replay keep the status `statusOf` reads from the value', async () => {
    const store = new MemoryStore();
    const events: IdempotencyEvent[] = [];
    const engine = createEngine({ store, onEvent: (event) => events.push(event) });
    const request = {
      scope,
      key: 'k',
      fingerprint: 'f',
      statusOf: (value: unknown) => (value as Answer).status,
    };
    const handler = vi.fn((): Answer => ({ status: 201, body: 'created' }));

    expect(await engine.execute(request, handler)).toMatchObject({ ok: true, replayed: false });
    expect(await store.get(scope, 'k')).toMatchObject({ outcome: { kind: 'success', status: 201 } });
    expect(events.find((event) => event.type === 'completed')).toMatchObject({ status: 201, outcomeKind: 'success' });

    expect(await engine.execute(request, handler)).toMatchObject({
      ok: true,
      replayed: true,
      value: { status: 201, body: 'created' },
    });
    expect(events.find((event) => event.type === 'replayed')).toMatchObject({ status: 201 });
    expect(handler).toHaveBeenCalledTimes(1);
  });

  it('A1: without `statusOf` a success value is stored with status 200, as before', async () => {
    const store = new MemoryStore();
    const engine = createEngine({ store });
    await engine.execute({ scope, key: 'k', fingerprint: 'f' }, () => ({ status: 201 }));
    expect(await store.get(scope, 'k')).toMatchObject({ outcome: { kind: 'success', status: 200 } });
  });

  it('E4: a value the serializer refuses as too large reaches its client, and replays as the 500 of maxStoredBytes with its figures', async () => {
    const store = new MemoryStore();
    const engine = createEngine({ store, maxStoredBytes: 64 });
    const request = {
      scope,
      key: 'k',
      fingerprint: 'f',
      serializer: answers(10),
      statusOf: (value: unknown) => (value as Answer).status,
    };
    const big: Answer = { status: 202, body: 'x'.repeat(50) };
    const handler = vi.fn(() => big);

    expect(await engine.execute(request, handler)).toMatchObject({ ok: true, value: big, replayed: false });
    const replay = await engine.execute(request, handler);
    expect(replay).toMatchObject({
      ok: false,
      replayed: true,
      error: {
        status: 500,
        code: 'INTERNAL_SERVER_ERROR',
        data: {
          executed: true,
          reason: 'too_large',
          outcomeKind: 'success',
          status: 202,
          bytes: 11,
          maxStoredBytes: 64,
        },
      },
    });
    expect((replay as { error: Error }).error.message).toMatch(
      /was executed \(outcome: success, status 202\), but its result \(at least 11 bytes\) is larger than the 64 bytes.*Do not retry/,
    );
    expect(await store.get(scope, 'k')).toMatchObject({ outcome: { kind: 'error', status: 500 } });
    expect(handler).toHaveBeenCalledTimes(1);
  });

  it('exposes the resolved maxStoredBytes on the policy (default 1 MiB)', () => {
    expect(createEngine({ store: new MemoryStore() }).policy.maxStoredBytes).toBe(1024 * 1024);
    expect(createEngine({ store: new MemoryStore(), maxStoredBytes: 10 }).policy.maxStoredBytes).toBe(10);
  });
});
