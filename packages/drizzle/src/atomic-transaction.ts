/**
 * Atomic mode's transaction over drizzle's transaction (`openTransaction`, owned-transaction.ts), written once for every dialect:
 * the engine's work runs with the dialect's statements, and the transaction ends as the work
 * says — committed, or rolled back through drizzle's own `tx.rollback()` — answering the work's
 * value either way. Only a failure of the database makes it reject.
 */
import type { TransactionEnd } from '@idem/core/store';
import { TransactionRollbackError } from 'drizzle-orm/errors';

/** What a drizzle transaction offers here: its rollback, and its nested transactions (savepoints). */
interface DrizzleTx<TTx> {
  rollback(): never;
  transaction<T>(work: (nested: TTx) => Promise<T>): Promise<T>;
}

/**
 * Runs `work` inside `open` (a dialect's `openTransaction`) and ends the transaction as `work`'s
 * {@link TransactionEnd} says.
 */
export async function transactionEndingAs<TTx extends DrizzleTx<TTx>, R>(
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

/**
 * `StoreTransaction.savepoint` on `tx`: drizzle's nested transaction (`SAVEPOINT`), rolled back to
 * the savepoint when `work` throws, with the error rethrown.
 */
export function savepointOn<TTx>(tx: DrizzleTx<TTx>) {
  return <T>(work: (nested: TTx) => Promise<T> | T): Promise<T> => tx.transaction(async (nested) => work(nested));
}
