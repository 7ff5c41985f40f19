import { StoreConfigurationError } from '@idem/core';
import type { DrizzleQueryError } from 'drizzle-orm/errors';
import { isDrizzleQueryError } from './drizzle-seams.js';
import type { TableNames } from './table-names.js';

/**
 * K5: a drizzle query error's message holds the statement's parameters — stored response
 * bodies, keys, tokens — and stores hand their errors to the engine, which emits them in
 * `storeError` events that users log. The store rethrows them as this error instead: the
 * driver's own message and code, with the driver error as `cause`, and no parameters.
 */
export class StoreQueryError extends Error {
  /** The driver's error code, e.g. PostgreSQL's SQLSTATE `57P01` or SQLite's `SQLITE_BUSY`. */
  readonly code: string | undefined;

  constructor(error: DrizzleQueryError) {
    const cause = error.cause;
    super(
      `[idem] store query failed: ${cause?.message ?? 'unknown driver error'}`,
      cause === undefined ? undefined : { cause },
    );
    this.name = 'StoreQueryError';
    const code = (cause as { code?: unknown } | undefined)?.code;
    this.code = typeof code === 'string' ? code : undefined;
  }
}

/**
 * The table a driver error says does not exist, or undefined: PostgreSQL's SQLSTATE `42P01`
 * (`relation "x" does not exist`), MySQL's `ER_NO_SUCH_TABLE` (`Table 'db.x' doesn't exist`),
 * SQLite's `no such table: x` (better-sqlite3, libsql). Drizzle's query error (0.44+) carries the
 * driver's error as `cause`; older versions throw it as it is.
 */
export function missingTableOf(error: unknown): string | undefined {
  for (let current = error, depth = 0; current instanceof Error && depth < 4; depth += 1) {
    const { code, errno } = current as { code?: unknown; errno?: unknown };
    const named =
      code === '42P01'
        ? /relation "(?:[^"]+\.)?([^"]+)" does not exist/.exec(current.message)
        : code === 'ER_NO_SUCH_TABLE' || errno === 1146
          ? /Table '(?:[^'.]+\.)?([^']+)' doesn't exist/.exec(current.message)
          : /\bno such table: (?:\w+\.)?(\S+)/i.exec(current.message);
    if (named) return named[1];
    current = current.cause;
  }
  return undefined;
}

/** E5: the store's tables are missing, as an error that names them and what to do. */
export function missingTablesError(tables: TableNames, cause: unknown): StoreConfigurationError {
  return new StoreConfigurationError(
    `[idem] the store's tables do not exist: it looked for ${tables.keys} and ${tables.history}. ` +
      'Create them (npx idem migrate, migrate(db), or your drizzle-kit migration of definePgTables/defineSqliteTables/defineMysqlTables), ' +
      'or give createDrizzleStore the tables option they were created with (e.g. { tables: { prefix: "myapp_" } }).',
    { cause: withoutParameters(cause) },
  );
}

/**
 * `error`, as a {@link StoreQueryError} when it is drizzle's query error (which lists the
 * parameters), and as a {@link StoreConfigurationError} naming `tables` when it says a table is missing.
 */
export function withoutParameters(error: unknown, tables?: TableNames): unknown {
  // Only the store's own tables: a handler's table missing inside an atomic transaction is the handler's error.
  const missing = tables && missingTableOf(error);
  if (tables && (missing === tables.keys || missing === tables.history)) return missingTablesError(tables, error);
  return isDrizzleQueryError(error) ? new StoreQueryError(error) : error;
}

/** `method`, rejecting with {@link withoutParameters} of what it rejects with. */
export function rejectingWithoutParameters<A extends unknown[], R>(
  method: (...args: A) => Promise<R>,
  tables?: TableNames,
): (...args: A) => Promise<R> {
  return async (...args) => {
    try {
      return await method(...args);
    } catch (error) {
      throw withoutParameters(error, tables);
    }
  };
}
