/**
 * What mysql2 answers and what MySQL's rows hold: the rows of a read and the affected rows of a
 * write (through drizzle, `[rows | ResultSetHeader, fields]`), the error codes the store acts on,
 * the byte bounds of the `varbinary` columns, and the `IN` list of primary keys a read found.
 * The row readers of this dialect: the CLI and the migrations read through `executedRows`.
 */
import type { ClaimRequest } from '@idem/core/store';
import { sql, type SQL } from 'drizzle-orm';
import { boundTuples } from '../row-writes.js';
import { MYSQL_COLUMN_BYTES } from './schema.js';

/** What mysql2 answers to a write through drizzle: `[ResultSetHeader, fields]`; its affected rows. */
export function affectedRows(result: unknown): number {
  const header: unknown = Array.isArray(result) ? result[0] : undefined;
  const count = (header as { affectedRows?: unknown } | undefined)?.affectedRows;
  if (typeof count !== 'number')
    throw new TypeError(
      "[idem] the MySQL driver did not answer a write with mysql2's [ResultSetHeader, fields]: use drizzle-orm/mysql2",
    );
  return count;
}

/** The rows of a `db.execute()` of a SELECT on mysql2: `[rows, fields]`. */
export function executedRows(result: unknown): Array<Record<string, unknown>> {
  const rows: unknown = Array.isArray(result) ? result[0] : undefined;
  if (!Array.isArray(rows))
    throw new TypeError(
      "[idem] the MySQL driver did not answer a query with mysql2's [rows, fields]: use drizzle-orm/mysql2",
    );
  return rows as Array<Record<string, unknown>>;
}

/** Whether the MySQL error `code` (`errno`) is somewhere in drizzle's error chain. */
function hasErrorCode(error: unknown, name: string, errno: number): boolean {
  for (let cause: unknown = error; cause instanceof Error; cause = cause.cause) {
    const found = cause as { code?: unknown; errno?: unknown };
    if (found.code === name || found.errno === errno) return true;
  }
  return false;
}

/** ER_DUP_ENTRY (1062), somewhere in drizzle's error chain. */
export const isDuplicateKey = (error: unknown) => hasErrorCode(error, 'ER_DUP_ENTRY', 1062);
/** ER_LOCK_DEADLOCK (1213): InnoDB rolled the whole transaction back, so it did nothing. */
const isDeadlock = (error: unknown) => hasErrorCode(error, 'ER_LOCK_DEADLOCK', 1213);
/** How many times a group transaction that InnoDB chose as a deadlock victim is run again. */
const DEADLOCK_RETRIES = 3;

/** `run()`, again while it fails as a deadlock victim (rolled back whole) up to {@link DEADLOCK_RETRIES} times. */
export async function retryingDeadlocks<T>(run: () => Promise<T>): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await run();
    } catch (error) {
      if (attempt >= DEADLOCK_RETRIES || !isDeadlock(error)) throw error;
    }
  }
}

/** The bytes of a string as MySQL's `varbinary` columns compare them. */
export const byBytes = (a: string, b: string) => Buffer.compare(Buffer.from(a), Buffer.from(b));

/**
 * The `varbinary` columns hold a bounded number of bytes. A longer value is refused here rather
 * than left to the server, which truncates it (and may merge two keys into one) when the
 * session's `sql_mode` is not strict.
 */
export function assertFits(request: Pick<ClaimRequest, 'scope' | 'key' | 'token'>): void {
  for (const field of ['scope', 'key', 'token'] as const) {
    const bytes = Buffer.byteLength(request[field], 'utf8');
    const limit = MYSQL_COLUMN_BYTES[field];
    if (bytes > limit)
      throw new RangeError(
        `[idem] MySQL store: the ${field} is ${bytes} bytes long in UTF-8; its column holds at most ${limit}`,
      );
  }
}

/** Whether {@link assertFits} lets `request` through. */
export function fits(request: Pick<ClaimRequest, 'scope' | 'key' | 'token'>): boolean {
  return (['scope', 'key', 'token'] as const).every(
    (field) => Buffer.byteLength(request[field], 'utf8') <= MYSQL_COLUMN_BYTES[field],
  );
}

/** `(a, b) IN ((…), (…))` over the primary keys a read found. */
export const primaryKeyIn = (columns: SQL[], rows: unknown[][]) =>
  sql`(${sql.join(columns, sql`, `)}) IN (${boundTuples(rows)})`;
