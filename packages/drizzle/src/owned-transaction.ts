/**
 * Every transaction the store opens goes through {@link openTransaction}: on a driver with a
 * connection pool, the store owns the lifetime of the connection the transaction runs on.
 *
 * drizzle's pooled `transaction()` checks a connection out, runs `BEGIN` before the `try … finally`
 * that releases it, and releases it without the error (drizzle-orm 0.41–0.45 on node-postgres,
 * neon-serverless, vercel-postgres and mysql2; 1.0.0-rc.5 releases after a failed `BEGIN`, still
 * without the error). A connection whose backend died just before `BEGIN` was never given back:
 * a burst of connection losses leaked the whole pool, and the store answered 503 for good while
 * the database was up. Here the store checks the connection out itself, runs drizzle's own
 * transaction (`BEGIN`, the body, `COMMIT` or `ROLLBACK`, savepoints) on a session bound to that
 * connection (`boundToConnection`, drizzle-seams.ts), and gives it back on every path: with the
 * error when `BEGIN`, `COMMIT` or `ROLLBACK` failed or the connection reported one (node-postgres:
 * `release(error)`, which makes pg-pool destroy it; mysql2: `destroy()`), plainly otherwise.
 *
 * The other drivers have no such pool shape and run drizzle's `db.transaction` as it is:
 * postgres.js reserves its connection in `sql.begin` and gives it back on every path; PGlite is one
 * in-process connection; better-sqlite3 and libsql open SQLite transactions through the driver's
 * own `transaction()`.
 */
import type { MySqlTransactionConfig } from 'drizzle-orm/mysql-core';
import type { PgTransactionConfig } from 'drizzle-orm/pg-core';
import type { SQLiteTransactionConfig } from 'drizzle-orm/sqlite-core';
import type { AnyMysqlDatabase, AnyPgDatabase, AsyncSQLiteDatabase, SyncSQLiteDatabase } from './dialect.js';
import { boundToConnection, sessionOf, type DrizzleSession } from './drizzle-seams.js';

/** The transaction drizzle hands `db.transaction`'s callback on a database of type `D`. */
export type TransactionOf<D extends { transaction: (...args: never[]) => unknown }> = Parameters<
  Parameters<D['transaction']>[0]
>[0];

/** A pg-compatible pool (node-postgres, and the Neon and Vercel pools built on it). */
interface PgPool {
  connect(callback: (error: Error | undefined, client: PgPoolClient | undefined) => void): void;
  totalCount: number;
  idleCount: number;
}
interface PgPoolClient {
  release(error?: Error | boolean): void;
  on(event: 'error', listener: (error: unknown) => void): unknown;
  removeListener(event: 'error', listener: (error: unknown) => void): unknown;
}
/** mysql2's promise pool. */
interface MysqlPool {
  getConnection(): Promise<MysqlPoolConnection>;
}
interface MysqlPoolConnection {
  release(): void;
  destroy(): void;
}

/** A `pg.Pool` (a pool hands each transaction a connection of its own) rather than one `pg.Client`. */
export function isPgPool(client: unknown): client is PgPool {
  return (
    typeof client === 'object' &&
    client !== null &&
    'totalCount' in client &&
    'idleCount' in client &&
    typeof (client as { connect?: unknown }).connect === 'function'
  );
}

function isMysqlPool(client: unknown): client is MysqlPool {
  return (
    typeof client === 'object' &&
    client !== null &&
    typeof (client as { getConnection?: unknown }).getConnection === 'function'
  );
}

/** An `Error` for pg-pool's `release(error)`, whatever was thrown. */
function asError(thrown: unknown): Error {
  return thrown instanceof Error ? thrown : new Error(`[idem] the transaction's connection failed: ${String(thrown)}`);
}

/**
 * Runs drizzle's transaction on `session` bound to `connection`, and answers whether the
 * connection is unfit to go back to the pool: `BEGIN` failed (the body never started), `COMMIT`
 * failed (the body returned), or `ROLLBACK` failed (the transaction rejected with another error
 * than the body's).
 */
async function onConnection<T>(
  session: DrizzleSession,
  connection: unknown,
  body: (tx: never) => Promise<T>,
  config: unknown,
  broken: (error: unknown) => void,
): Promise<T> {
  const run: { started: boolean; returned: boolean; threw?: { error: unknown } } = { started: false, returned: false };
  try {
    return (await boundToConnection(session, connection).transaction(async (tx: never) => {
      run.started = true;
      try {
        const value = await body(tx);
        run.returned = true;
        return value;
      } catch (error) {
        run.threw = { error };
        throw error;
      }
    }, config)) as T;
  } catch (error) {
    if (!run.started || run.returned || run.threw?.error !== error) broken(error);
    throw error;
  }
}

async function onPgPool<T>(
  pool: PgPool,
  session: DrizzleSession,
  body: (tx: never) => Promise<T>,
  config: unknown,
): Promise<T> {
  let lost: Error | undefined;
  // A checked-out client whose backend dies between statements emits 'error': recorded here
  // (without a listener it would be thrown at the process), and the client is not reused. The
  // listener is attached in pg-pool's callback, in the same turn as the checkout: the server's
  // notice can arrive in the very chunk that completed a new connection, before a promise's
  // continuation would run.
  const onError = (error: unknown) => {
    lost ??= asError(error);
  };
  const client = await new Promise<PgPoolClient>((resolve, reject) =>
    pool.connect((error, checkedOut) => {
      if (error || !checkedOut) return reject(error ?? new Error('[idem] the pool gave no client'));
      checkedOut.on('error', onError);
      resolve(checkedOut);
    }),
  );
  try {
    return await onConnection(session, client, body, config, (error) => {
      lost ??= asError(error);
    });
  } finally {
    client.removeListener('error', onError);
    client.release(lost);
  }
}

async function onMysqlPool<T>(
  pool: MysqlPool,
  session: DrizzleSession,
  body: (tx: never) => Promise<T>,
  config: unknown,
): Promise<T> {
  const connection = await pool.getConnection();
  let lost = false;
  try {
    return await onConnection(session, connection, body, config, () => {
      lost = true;
    });
  } finally {
    if (lost) connection.destroy();
    else connection.release();
  }
}

/**
 * `db.transaction(body, config)` on a connection the store owns: see the module comment. On a
 * PostgreSQL or MySQL pool the connection goes back to the pool on every path, destroyed when a
 * transaction statement failed; on the other drivers this is drizzle's `db.transaction`.
 */
export function openTransaction<T>(
  db: AnyPgDatabase,
  body: (tx: TransactionOf<AnyPgDatabase>) => Promise<T>,
  config?: PgTransactionConfig,
): Promise<T>;
export function openTransaction<T>(
  db: AnyMysqlDatabase,
  body: (tx: TransactionOf<AnyMysqlDatabase>) => Promise<T>,
  config?: MySqlTransactionConfig,
): Promise<T>;
export function openTransaction<T>(
  db: SyncSQLiteDatabase,
  body: (tx: TransactionOf<SyncSQLiteDatabase>) => T,
  config?: SQLiteTransactionConfig,
): T;
export function openTransaction<T>(
  db: AsyncSQLiteDatabase,
  body: (tx: TransactionOf<AsyncSQLiteDatabase>) => Promise<T>,
  config?: SQLiteTransactionConfig,
): Promise<T>;
export function openTransaction(db: object, body: (tx: never) => unknown, config?: unknown): unknown {
  const session = sessionOf(db);
  if (session && isPgPool(session.client))
    return onPgPool(session.client, session, body as (tx: never) => Promise<unknown>, config);
  if (session && isMysqlPool(session.client))
    return onMysqlPool(session.client, session, body as (tx: never) => Promise<unknown>, config);
  return (db as { transaction(body: (tx: never) => unknown, config?: unknown): unknown }).transaction(body, config);
}
