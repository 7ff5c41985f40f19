/**
 * What code outside the dialect folders (the migrations, the sweep lock, the CLI) knows of each
 * dialect: its tables, its clock, and how to read the rows a statement answered. The seam
 * between them and `sqlite/`, `pg/` and `mysql/`, whose statements stay their own.
 */
import type { SQL } from 'drizzle-orm';
import { mysqlClock, postgresClock, sqliteClock, type DatabaseClock } from './database-clock.js';
import type { AnyMysqlDatabase, AnyPgDatabase, AnySQLiteDatabase, Dialect } from './dialect.js';
import { executedRows as mysqlExecutedRows } from './mysql/rows.js';
import { defineMysqlTables } from './mysql/schema.js';
import { pgExecutedRows } from './pg/rows.js';
import { definePgTables } from './pg/schema.js';
import { defineSqliteTables } from './sqlite/schema.js';
import type { TableNames } from './table-names.js';

/** A row as the database answered it: column name → raw value. */
export type Row = Record<string, unknown>;

/**
 * The rows of a `db.execute()` on PostgreSQL (node-postgres, PGlite: `{ rows }`; postgres-js: an
 * array) or MySQL (mysql2: `[rows, fields]`; `varbinary` columns come as Buffers).
 */
export function executedRows(dialect: Exclude<Dialect, 'sqlite'>, result: unknown): Row[] {
  return dialect === 'mysql' ? mysqlExecutedRows(result) : pgExecutedRows(result);
}

/** A drizzle instance with its dialect (what `detectDialect` and `openDatabase` answer). */
export type DialectDatabase =
  | { dialect: 'postgres'; db: AnyPgDatabase }
  | { dialect: 'sqlite'; db: AnySQLiteDatabase }
  | { dialect: 'mysql'; db: AnyMysqlDatabase };

/** Runs a read statement on any dialect and answers its rows as plain objects. */
export async function readRows(detected: DialectDatabase, query: SQL): Promise<Row[]> {
  if (detected.dialect === 'sqlite') return (await detected.db.all<Row>(query)) as Row[];
  if (detected.dialect === 'mysql') return mysqlExecutedRows(await detected.db.execute(query));
  return pgExecutedRows(await detected.db.execute(query));
}

/** The tables of `dialect` under `names`. */
export function tablesOf(dialect: Dialect, names: TableNames) {
  if (dialect === 'mysql') return defineMysqlTables(names);
  return dialect === 'sqlite' ? defineSqliteTables(names) : definePgTables(names);
}

/** The database clock of `dialect`. */
export function clockOf(dialect: Dialect): DatabaseClock {
  return dialect === 'sqlite' ? sqliteClock : dialect === 'mysql' ? mysqlClock : postgresClock;
}
