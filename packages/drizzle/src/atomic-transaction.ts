/**
 * Atomic mode's transaction over drizzle's transaction (`openTransaction`, owned-transaction.ts), written once for every dialect:
 * the engine's work runs with the dialect's statements, and the transaction ends as the work
 * says — committed, or rolled back through drizzle's own `tx.rollback()` — answering the work's
 * value either way. Only a failure of the database makes it reject.
 */
import type { TransactionEnd } from '@idem/core/store';
import { sql, type SQL } from 'drizzle-orm';
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

/** What runs one statement of savepoint control on a transaction (`tx.execute` on PostgreSQL and MySQL, `tx.run` on SQLite). */
export type SavepointStatement = (statement: SQL) => Promise<unknown>;

/**
 * `StoreTransaction.savepoint` and `recoveryPoint` on a transaction, written once for every
 * dialect with raw `SAVEPOINT` / `ROLLBACK TO SAVEPOINT` / `RELEASE SAVEPOINT` (the same three
 * statements on PostgreSQL, MySQL and SQLite), run through `exec`.
 *
 * `savepoint(work)` opens `idem_handler_<n>` and hands `work` the transaction itself (`claim.tx`:
 * the handler's own nested `tx.transaction` calls then take drizzle's savepoints as usual). When
 * `work` returns, the savepoint is released; when it throws, the transaction goes back to the
 * latest recovery point taken inside it (`idem_recovery_<n>`, E8), or to the savepoint's start
 * when there is none, the savepoint is released (the writes up to the recovery point stay in the
 * transaction) and the error is rethrown. Drizzle's nested `tx.transaction` cannot do that: it
 * rolls back to its own start whatever happened inside.
 *
 * `recoveryPoint()` sets `idem_recovery_<n>` in the innermost open savepoint (a savepoint of a
 * name that exists replaces it on MySQL and shadows it on PostgreSQL and SQLite: a rollback goes
 * to the latest either way). Outside any savepoint nothing can roll the writes back but the whole
 * transaction, so there it does nothing.
 */
export function savepointsOn<TTx>(tx: TTx, exec: SavepointStatement) {
  /** The open savepoints, innermost last: each one's number and whether it holds a recovery point. */
  const open: Array<{ id: number; recovery: boolean }> = [];
  let opened = 0;
  return {
    async savepoint<T>(work: (tx: TTx) => Promise<T> | T): Promise<T> {
      const frame = { id: ++opened, recovery: false };
      const handler = sql.raw(`idem_handler_${frame.id}`);
      await exec(sql`SAVEPOINT ${handler}`);
      open.push(frame);
      let value: T;
      try {
        value = await work(tx);
      } catch (error) {
        open.splice(open.indexOf(frame), 1);
        const back = frame.recovery ? sql.raw(`idem_recovery_${frame.id}`) : handler;
        await exec(sql`ROLLBACK TO SAVEPOINT ${back}`);
        await exec(sql`RELEASE SAVEPOINT ${handler}`);
        throw error;
      }
      open.splice(open.indexOf(frame), 1);
      await exec(sql`RELEASE SAVEPOINT ${handler}`);
      return value;
    },
    async recoveryPoint(): Promise<void> {
      const frame = open.at(-1);
      if (!frame) return;
      await exec(sql`SAVEPOINT ${sql.raw(`idem_recovery_${frame.id}`)}`);
      frame.recovery = true;
    },
  };
}
