/**
 * Atomic mode is a store capability (`transaction`): the engine and the adapters refuse it,
 * before anything runs, on a store that does not have it. Its behaviour on real databases is the
 * conformance suite's atomic section (conformance.ts), packages/drizzle/test/atomic.test.ts and,
 * over HTTP, the adapters' atomic tests.
 */
import { describe, expect, it } from 'vitest';
import { createEngine, MemoryStore } from '@idem/core';
import { createAdapterKit } from '@idem/core/adapter';

describe('atomic mode without a store that has it', () => {
  it('executeAtomic on a MemoryStore is refused with a TypeError, and the handler does not run', async () => {
    const store = new MemoryStore();
    let runs = 0;
    await expect(
      createEngine({ store }).executeAtomic({ scope: 'acct_1/pay', key: 'k-1', fingerprint: null }, () => {
        runs++;
      }),
    ).rejects.toThrow(
      new TypeError(
        '[idem] executeAtomic needs a store with atomic mode (its `transaction`: AtomicMode in @idem/core/store), and this store has none: use `execute`, or use a store that has it (@idem/drizzle: the drivers its README lists under Drivers).',
      ),
    );
    expect(runs).toBe(0);
    expect(await store.get('acct_1/pay', 'k-1')).toBeNull();
  });

  it('an adapter created with atomic: true on a MemoryStore is refused at once', () => {
    expect(() =>
      createAdapterKit(
        { store: new MemoryStore(), principal: () => 'p', atomic: true },
        { name: 'idempotency()', field: 'input field' },
      ),
    ).toThrow(/^\[idem\] idempotency\(\): `atomic: true` needs a store with atomic mode/);
    expect(() =>
      createAdapterKit(
        { store: new MemoryStore(), principal: () => 'p', atomic: false },
        { name: 'idempotency()', field: 'input field' },
      ),
    ).not.toThrow();
  });
});
