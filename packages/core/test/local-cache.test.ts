import { runStoreConformance } from '@idem/core/conformance';
import { withLocalCache } from '@idem/core/store';
import type { ClaimRequest, IdempotencyStore } from '@idem/core/store';
import fc from 'fast-check';
import { describe, expect, it, vi } from 'vitest';
import { createEngine, FingerprintMismatchError, MemoryStore } from '../src/index.js';

runStoreConformance({ name: 'MemoryStore withLocalCache', createStore: async () => withLocalCache(new MemoryStore()) });

/** A store clock the test moves by hand, shared by the store and the cache. */
function manualClock(start = 1_700_000_000_000) {
  let t = start;
  return { now: () => t, advance: (ms: number) => (t += ms) };
}

const request = (overrides: Partial<ClaimRequest> = {}): ClaimRequest => ({
  scope: 'payments.create/acct_1',
  key: 'k1',
  fingerprint: 'fp-1',
  token: `t-${Math.random()}`,
  leaseMs: 1_000,
  retentionMs: 10_000,
  expiredReuse: 'execute',
  ...overrides,
});

async function completed(store: IdempotencyStore, overrides: Partial<ClaimRequest> = {}) {
  const claim = await store.claim(request(overrides));
  if (claim.outcome !== 'claimed') throw new Error('expected a claim');
  const { scope, key, token } = claim.record;
  await store.complete({ scope, key, token, outcome: { kind: 'success', status: 200, body: '{"id":1}' } });
}

describe('withLocalCache', () => {
  it('answers the second replay of a completed record without asking the store', async () => {
    const inner = new MemoryStore();
    const claim = vi.spyOn(inner, 'claim');
    const store = withLocalCache(inner);
    await completed(store);
    const first = await store.claim(request());
    const second = await store.claim(request());
    expect(first).toMatchObject({ outcome: 'existing', record: { state: 'completed' } });
    expect(second).toEqual({ ...first, now: second.outcome === 'existing' ? second.now : undefined });
    expect(claim).toHaveBeenCalledTimes(2);
  });

  it('still answers 422 from the cache when the payload differs (F1)', async () => {
    const store = withLocalCache(new MemoryStore());
    const engine = createEngine({ store });
    const run = vi.fn(() => ({ id: 1 }));
    const call = (fingerprint: string) =>
      engine.execute({ scope: 'payments.create/acct_1', key: 'k2', fingerprint }, run);
    await call('fp-a');
    await expect(call('fp-a')).resolves.toMatchObject({ replayed: true });
    await expect(call('fp-a')).resolves.toMatchObject({ replayed: true });
    await expect(call('fp-b')).rejects.toBeInstanceOf(FingerprintMismatchError);
    expect(run).toHaveBeenCalledTimes(1);
  });

  it('never serves a record once its retention has passed on the store clock (R1, R2)', async () => {
    const clock = manualClock();
    const inner = new MemoryStore({ now: clock.now });
    const store = withLocalCache(inner, { now: clock.now });
    await completed(store);
    await store.claim(request());
    clock.advance(10_000);
    const claim = vi.spyOn(inner, 'claim');
    const reused = await store.claim(request({ token: 'next' }));
    expect(reused).toMatchObject({ outcome: 'claimed', record: { generation: 2, token: 'next' } });
    expect(claim).toHaveBeenCalledTimes(1);
  });

  it('keeps at most maxEntries records, dropping the least recently replayed', async () => {
    const inner = new MemoryStore();
    const store = withLocalCache(inner, { maxEntries: 2 });
    for (const key of ['a', 'b', 'c']) {
      await completed(store, { key });
      await store.claim(request({ key }));
    }
    const claim = vi.spyOn(inner, 'claim');
    await store.claim(request({ key: 'c' }));
    await store.claim(request({ key: 'b' }));
    expect(claim).toHaveBeenCalledTimes(0);
    await store.claim(request({ key: 'a' }));
    expect(claim).toHaveBeenCalledTimes(1);
  });

  it('refuses a bound that is not a positive integer', () => {
    expect(() => withLocalCache(new MemoryStore(), { maxEntries: 0 })).toThrow(RangeError);
  });

  it('keeps the store’s other methods and their `this`', async () => {
    const inner = new MemoryStore();
    const store = withLocalCache(inner);
    await completed(store);
    expect(await store.get('payments.create/acct_1', 'k1')).toMatchObject({ state: 'completed' });
    await expect(store.ping()).resolves.toBeUndefined();
  });

  /** Operations on a few keys, with the clock moving past leases and retention. */
  const operation = fc.oneof(
    fc.record({
      type: fc.constant('claim' as const),
      key: fc.constantFrom('a', 'b', 'c'),
      fingerprint: fc.constantFrom('fp-1', 'fp-2', null),
      expiredReuse: fc.constantFrom('execute' as const, 'reject' as const),
      retentionMs: fc.constantFrom(50, 500, 5_000),
    }),
    fc.record({
      type: fc.constantFrom('complete' as const, 'release' as const, 'renew' as const),
      key: fc.constantFrom('a', 'b', 'c'),
    }),
    fc.record({ type: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 2_000 }) }),
    fc.record({ type: fc.constant('sweep' as const) }),
  );

  it('answers every sequence of claims, completions, releases, sweeps and clock moves exactly as the undecorated store', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(operation, { maxLength: 60 }), fc.integer({ min: 1, max: 3 }), async (ops, bound) => {
        const clock = manualClock();
        const plain = new MemoryStore({ now: clock.now });
        const cached = withLocalCache(new MemoryStore({ now: clock.now }), { now: clock.now, maxEntries: bound });
        const tokens = new Map<string, string>();
        let n = 0;
        for (const op of ops) {
          if (op.type === 'advance') {
            clock.advance(op.ms);
          } else if (op.type === 'sweep') {
            expect(await cached.sweep()).toEqual(await plain.sweep());
          } else if (op.type === 'claim') {
            const claim = request({ ...op, leaseMs: 300, token: `t${n++}` });
            const expected = await plain.claim(claim);
            expect(await cached.claim(claim)).toEqual(expected);
            if (expected.outcome === 'claimed') tokens.set(op.key, claim.token);
          } else {
            const owner = { scope: 'payments.create/acct_1', key: op.key, token: tokens.get(op.key) ?? 'none' };
            const outcome = { kind: 'success' as const, status: 200, body: `"${op.key}"` };
            if (op.type === 'complete')
              expect(await cached.complete({ ...owner, outcome })).toBe(await plain.complete({ ...owner, outcome }));
            else if (op.type === 'release') expect(await cached.release(owner)).toBe(await plain.release(owner));
            else
              expect(await cached.renew({ ...owner, leaseMs: 300 })).toBe(
                await plain.renew({ ...owner, leaseMs: 300 }),
              );
          }
        }
        for (const key of ['a', 'b', 'c'])
          expect(await cached.timeline('payments.create/acct_1', key)).toEqual(
            await plain.timeline('payments.create/acct_1', key),
          );
      }),
      { numRuns: 300 },
    );
  });
});
