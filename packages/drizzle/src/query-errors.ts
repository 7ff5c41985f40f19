import { StoreConfigurationError } from '@idem/core';
import type { DrizzleQueryError } from 'drizzle-orm/errors';
import { isDrizzleQueryError } from './drizzle-seams.js';
import type { Dialect } from './dialect.js';
import { addedColumn } from './migrate.js';
import { EMBEDDED_MIGRATIONS } from './migrations.generated.js';
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

/** A column a driver error says does not exist, and the table it names, when it names one. */
export interface MissingColumn {
  column: string;
  table?: string;
}

/**
 * The column a driver error says does not exist, or undefined: PostgreSQL's SQLSTATE `42703`
 * (`column "c" of relation "t" does not exist`, `column t.c does not exist`, `column "c" does not
 * exist`), MySQL's `ER_BAD_FIELD_ERROR` 1054 (`Unknown column 't.c' in 'field list'`), SQLite's
 * `no such column: t.c` and `table t has no column named c`.
 */
export function missingColumnOf(error: unknown): MissingColumn | undefined {
  for (let current = error, depth = 0; current instanceof Error && depth < 4; depth += 1) {
    const { code, errno } = current as { code?: unknown; errno?: unknown };
    const message = current.message;
    if (code === '42703') {
      const ofRelation = /column "([^"]+)" of relation "(?:[^"]+\.)?([^"]+)" does not exist/.exec(message);
      if (ofRelation) return { column: ofRelation[1] as string, table: ofRelation[2] as string };
    }
    const found =
      code === '42703'
        ? /column (?:"?([^".\s]+)"?\.)?"?([^".\s]+)"? does not exist/.exec(message)
        : code === 'ER_BAD_FIELD_ERROR' || errno === 1054
          ? /Unknown column '(?:([^'.]+)\.)?([^'.]+)'/.exec(message)
          : (/\bno such column: (?:"?([^".\s]+)"?\.)?"?([^".\s]+)"?/i.exec(message) ??
            /\btable "?([^"\s]+)"? has no column named "?([^"\s]+)"?/i.exec(message));
    if (found) return { column: found[2] as string, ...(found[1] && { table: found[1] }) };
    current = current.cause;
  }
  return undefined;
}

/**
 * The columns a later migration of `dialect` added to the store's tables, by column name, each
 * with the migration that adds it and every column that migration adds (`ALTER TABLE … ADD`).
 */
function laterColumns(dialect: Dialect): Map<string, { tag: string; columns: string[] }> {
  const found = new Map<string, { tag: string; columns: string[] }>();
  for (const migration of EMBEDDED_MIGRATIONS[dialect]) {
    const added = migration.sql
      .split('--> statement-breakpoint')
      .map(addedColumn)
      .filter((each) => each !== undefined);
    const columns = [...new Set(added.map((each) => each.column))];
    for (const column of columns) found.set(column, { tag: migration.tag, columns });
  }
  return found;
}

/**
 * The store's own column that `error` says is missing, with the migration that adds it: the
 * column is one a later migration added, and the error names one of the store's tables (or,
 * where the driver's message names no table, drizzle's query error shows the statement ran on
 * one). A handler's own column missing inside an atomic transaction is the handler's error.
 */
function missingStoreColumn(error: unknown, tables: TableNames, dialect: Dialect) {
  const missing = missingColumnOf(error);
  if (!missing) return undefined;
  const added = laterColumns(dialect).get(missing.column);
  if (!added) return undefined;
  const ours = (table: string) => table === tables.keys || table === tables.history;
  if (missing.table !== undefined) return ours(missing.table) ? { column: missing.column, ...added } : undefined;
  for (let current = error, depth = 0; current instanceof Error && depth < 4; depth += 1) {
    // drizzle's query error (0.44+) carries the statement as `query`; mysql2's own error as `sql`.
    const { query, sql: statement } = current as { query?: unknown; sql?: unknown };
    for (const text of [query, statement])
      if (typeof text === 'string' && [tables.keys, tables.history].some((table) => text.includes(table)))
        return { column: missing.column, ...added };
    current = current.cause;
  }
  return undefined;
}

/**
 * E5: the store's tables lack a column a later migration adds (tables migrated by an older
 * version of the package), as an error that names the missing column, the migration that adds it
 * with its other columns, and what to do.
 */
export function missingColumnsError(
  tables: TableNames,
  missing: { column: string; tag: string; columns: string[] },
  cause: unknown,
): StoreConfigurationError {
  const others = missing.columns.filter((column) => column !== missing.column);
  const listed = [missing.column, ...others].join(', ');
  return new StoreConfigurationError(
    `[idem] the store's tables ${tables.keys} and ${tables.history} lack the column ${missing.column}` +
      (others.length > 0 ? ` (migration ${missing.tag} adds ${listed})` : ` (migration ${missing.tag} adds it)`) +
      ": they were created by an older version of @idem/drizzle. Run the package's migrations again " +
      '(npx idem migrate, or migrate(db): it applies only the missing ones), or regenerate your drizzle-kit ' +
      `migration of definePgTables/defineSqliteTables/defineMysqlTables (it adds ${listed}).`,
    { cause: withoutParameters(cause) },
  );
}

/**
 * `error`, as a {@link StoreQueryError} when it is drizzle's query error (which lists the
 * parameters), and as a {@link StoreConfigurationError} naming `tables` when it says a table is
 * missing, or naming the columns when it says one of the store's later columns is missing (with
 * `dialect`: the columns come from that dialect's migrations).
 */
export function withoutParameters(error: unknown, tables?: TableNames, dialect?: Dialect): unknown {
  // Only the store's own tables: a handler's table missing inside an atomic transaction is the handler's error.
  const missing = tables && missingTableOf(error);
  if (tables && (missing === tables.keys || missing === tables.history)) return missingTablesError(tables, error);
  const column = tables && dialect && missingStoreColumn(error, tables, dialect);
  if (tables && column) return missingColumnsError(tables, column, error);
  return isDrizzleQueryError(error) ? new StoreQueryError(error) : error;
}

/** `method`, rejecting with {@link withoutParameters} of what it rejects with. */
export function rejectingWithoutParameters<A extends unknown[], R>(
  method: (...args: A) => Promise<R>,
  tables?: TableNames,
  dialect?: Dialect,
): (...args: A) => Promise<R> {
  return async (...args) => {
    try {
      return await method(...args);
    } catch (error) {
      throw withoutParameters(error, tables, dialect);
    }
  };
}
