/**
 * Atomic mode's transaction over drizzle's transaction (`openTransaction`, owned-transaction.ts), written once for every dialect:
 * the engine's work runs with the dialect's statements, and the transaction ends as the work
 * says — committed, or rolled back through drizzle's own `tx.rollback()` — answering the work's
 * value either way. Only a failure of the database makes it reject.
 */
import type { TransactionEnd } from '@idem/core/store';
import { TransactionRollbackError } from 'drizzle-orm/errors';

/** What a drizzle transaction offers here: its rollback. */
interface DrizzleTx {
  rollback(): never;
}

/**
 * Runs `work` inside `open` (a dialect's `openTransaction`) and ends the transaction as `work`'s
 * {@link TransactionEnd} says.
 */
export async function transactionEndingAs<TTx extends DrizzleTx, R>(
  open: (body: (tx: TTx) => Promise<void>) => Promise<void>,
  work: (tx: TTx) => Promise<TransactionEnd<R>>,
): Promise<R> {
  const ended: { end?: TransactionEnd<R> } = {};
  try {
    await open(async (tx) => {
      const end = await work(tx);
      ended.end = end;
      if (!end.commit) tx.rollback();
    });
  } catch (error) {
    if (!(ended.end?.commit === false && error instanceof TransactionRollbackError)) throw error;
  }
  if (!ended.end) throw new Error('[idem] the transaction ended before its work did');
  return ended.end.value;
}

/** A drizzle transaction's nested transactions (savepoints), on every driver. */
interface Nestable<TTx> {
  transaction<T>(work: (nested: TTx) => Promise<T>): Promise<T>;
}

/** Why a segment ends without its writes: the error its nested transaction is failed with. */
const ROLLED_BACK = Symbol('idem: segment rolled back');

/** A nested transaction (a savepoint) held open until `end` says how it ends. */
interface Segment<TTx> {
  nested: TTx;
  /** Releases the savepoint (`commit`: its writes join the enclosing transaction) or rolls back to it. */
  end(commit: boolean): Promise<void>;
}

/** Opens a nested transaction of `tx` and holds it open: drizzle's own savepoint, on the driver's own terms. */
async function openSegment<TTx extends Nestable<TTx>>(tx: TTx): Promise<Segment<TTx>> {
  let settle!: (commit: boolean) => void;
  const decided = new Promise<boolean>((resolve) => {
    settle = resolve;
  });
  let enter!: (nested: TTx) => void;
  const entered = new Promise<TTx>((resolve) => {
    enter = resolve;
  });
  const ended = tx.transaction(async (nested) => {
    enter(nested);
    if (!(await decided)) throw ROLLED_BACK;
  });
  const nested = await Promise.race([
    entered,
    ended.then(() => {
      throw new Error('[idem] a savepoint ended before it began');
    }),
  ]);
  return {
    nested,
    async end(commit) {
      settle(commit);
      try {
        await ended;
      } catch (error) {
        if (commit || error !== ROLLED_BACK) throw error;
      }
    },
  };
}

/**
 * The transaction a handler writes through while its savepoint is open: one object (`claim.tx`)
 * whose every property is read from the current segment's nested transaction, so that a recovery
 * point can move the handler on to a new segment without it noticing.
 */
function currentOf<TTx extends object>(current: () => TTx): TTx {
  return new Proxy(current(), {
    get(_, property) {
      const target = current();
      const value: unknown = Reflect.get(target, property, target);
      // Methods run on the current transaction; the class itself is handed out as it is.
      return typeof value === 'function' && property !== 'constructor' ? value.bind(target) : value;
    },
    set: (_, property, value) => Reflect.set(current(), property, value),
    has: (_, property) => Reflect.has(current(), property),
    getPrototypeOf: () => Reflect.getPrototypeOf(current()),
  });
}

/**
 * `StoreTransaction.savepoint` and `recoveryPoint` on a drizzle transaction, written once for
 * every dialect and driver, over drizzle's nested transactions (savepoints).
 *
 * `savepoint(work)` runs `work` in a segment: a nested transaction held open. A recovery point
 * (E8) ends the current segment keeping its writes (`RELEASE SAVEPOINT`: they join the enclosing
 * transaction) and opens the next one. When `work` throws, the current segment rolls back
 * (`ROLLBACK TO SAVEPOINT`): the transaction goes back to the latest recovery point, or to the
 * savepoint's start when there was none, and `savepoint` rethrows; when it returns, the segment
 * is released. `work` is handed one transaction for the whole run (`claim.tx`), which always
 * writes through the current segment; the handler's own `tx.transaction(...)` nest inside it.
 *
 * Why segments rather than a raw `SAVEPOINT idem_recovery` and `ROLLBACK TO SAVEPOINT
 * idem_recovery` around the work: postgres-js fails a whole transaction (or savepoint scope)
 * at its end when any statement run in it failed, even one the caller caught, unless that
 * statement ran in a savepoint scope of its own (`sql.savepoint`, which drizzle's nested
 * transactions use). A handler's failed statement under a raw savepoint would therefore fail the
 * transaction that stores the outcome. Drizzle's nested transactions are each driver's own way
 * to a savepoint, and a segment without a recovery point is exactly the one nested transaction
 * atomic mode used before recovery points.
 *
 * `recoveryPoint()` outside any savepoint does nothing: nothing rolls writes back there but the
 * whole transaction.
 */
export function savepointsOn<TTx extends Nestable<TTx> & object>(tx: TTx) {
  /** The open savepoints, innermost last: each one's recovery point. */
  const open: Array<() => Promise<void>> = [];
  return {
    async savepoint<T>(work: (tx: TTx) => Promise<T> | T): Promise<T> {
      let segment = await openSegment(tx);
      const recover = async () => {
        await segment.end(true);
        segment = await openSegment(tx);
      };
      open.push(recover);
      let value: T;
      try {
        value = await work(currentOf(() => segment.nested));
      } catch (error) {
        open.splice(open.indexOf(recover), 1);
        await segment.end(false);
        throw error;
      }
      open.splice(open.indexOf(recover), 1);
      await segment.end(true);
      return value;
    },
    async recoveryPoint(): Promise<void> {
      await open.at(-1)?.();
    },
  };
}
