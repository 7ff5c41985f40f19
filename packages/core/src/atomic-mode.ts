/**
 * Atomic mode is a store capability (see `AtomicMode`). What may use it is checked here, once:
 * by the engine for each `executeAtomic` call, and by the adapters when they are created.
 */
import type { AtomicMode, IdempotencyStore } from './store.js';

/** Who asks for atomic mode, which decides what it needs of the store and how a refusal reads. */
export type AtomicModeUser =
  /** `engine.executeAtomic`: any atomic mode; on a synchronous one, `handler` must be synchronous. */
  | { engine: true; handler: (...args: never[]) => unknown }
  /** An adapter (`atomic: true`), named in the message: its handlers await, so the store's transactions must span an `await`. */
  | { adapter: string };

/**
 * The store's atomic mode, bound to it, when `user` may use it.
 * @throws TypeError `[idem] …` when the store has none, or when its transactions are synchronous
 *   and `user` is an adapter or an `async` function.
 */
export function atomicModeFor<TTx>(store: IdempotencyStore<TTx>, user: AtomicModeUser): AtomicMode<TTx> {
  const { atomicHandlers, atomicClaim, atomicComplete } = store;
  if (atomicHandlers === undefined || !atomicClaim || !atomicComplete) {
    throw new TypeError(
      'adapter' in user
        ? `[idem] ${user.adapter}: \`atomic: true\` needs a store with atomic mode (@idem/drizzle on PostgreSQL, MySQL or libsql); this store has none`
        : '[idem] this store has no atomic mode: use a store that implements it (@idem/drizzle on PostgreSQL or SQLite), or `execute`',
    );
  }
  if (atomicHandlers === 'synchronous') {
    if ('adapter' in user) {
      throw new TypeError(
        `[idem] ${user.adapter}: atomic mode in the adapters needs transactions that can span the resolver's awaits (PostgreSQL, MySQL, or SQLite through libsql); better-sqlite3's cannot. On better-sqlite3, atomic mode is available through \`engine.executeAtomic\` with a synchronous handler.`,
      );
    }
    // A native `async` function always returns a promise: refused before it runs. Any other
    // handler that returns one is refused by the store, and its transaction rolled back.
    if (user.handler instanceof AsyncFunction) throw new TypeError(SYNCHRONOUS_HANDLER_REQUIRED);
  }
  return { atomicHandlers, atomicClaim: atomicClaim.bind(store), atomicComplete: atomicComplete.bind(store) };
}

const SYNCHRONOUS_HANDLER_REQUIRED =
  '[idem] atomic mode on SQLite needs a synchronous handler: better-sqlite3 transactions cannot span an await';

const AsyncFunction = (async () => {}).constructor;
