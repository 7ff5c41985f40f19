/**
 * Atomic mode is a store capability (`AtomicMode`: a `transaction` method). Whether a store has
 * it is checked here, once: by the engine for each `executeAtomic` call, and by the adapters
 * when they are created, so that `atomic: true` on a store without it fails at start-up.
 */
import type { AtomicMode, IdempotencyStore } from './store.js';

/**
 * The store's atomic mode, bound to it. `user` is who asks, in the message: `executeAtomic`, or
 * an adapter's `atomic: true` (`idempotency(): \`atomic: true\``), with what to do instead.
 * @throws TypeError `[idem] …` when the store has no atomic mode.
 */
export function atomicModeOf<TTx>(
  store: IdempotencyStore<TTx>,
  user: { asking: string; otherwise: string },
): AtomicMode<TTx> {
  const { transaction } = store;
  if (typeof transaction !== 'function') {
    throw new TypeError(
      `[idem] ${user.asking} needs a store with atomic mode (its \`transaction\`: AtomicMode in @idem/core/store), and this store has none: ${user.otherwise}, or use a store that has it (@idem/drizzle: the drivers its README lists under Drivers).`,
    );
  }
  return { transaction: transaction.bind(store) };
}
