/**
 * Dialect detection, Auth.js `@auth/drizzle-adapter` style: the drizzle instance says which
 * dialect it speaks. Only drizzle's `pg-core`, `sqlite-core` and `mysql-core` are imported
 * here, never a driver, so a Postgres app does not need better-sqlite3 installed and vice versa.
 */
import { is } from 'drizzle-orm';
import { MySqlDatabase, type MySqlQueryResultHKT, type PreparedQueryHKTBase } from 'drizzle-orm/mysql-core';
import { PgDatabase, type PgQueryResultHKT } from 'drizzle-orm/pg-core';
import { BaseSQLiteDatabase } from 'drizzle-orm/sqlite-core';

/** Any Postgres drizzle instance: node-postgres, PGlite, postgres.js, … */
export type AnyPgDatabase = PgDatabase<PgQueryResultHKT, any, any>;
/** A synchronous SQLite drizzle instance, such as `drizzle-orm/better-sqlite3`. */
export type SyncSQLiteDatabase = BaseSQLiteDatabase<'sync', any, any, any>;
/** A MySQL drizzle instance over mysql2 (`drizzle-orm/mysql2`). */
export type AnyMysqlDatabase = MySqlDatabase<MySqlQueryResultHKT, PreparedQueryHKTBase, any, any>;
/** The drizzle instances `createDrizzleStore` and `migrate` accept. */
export type DrizzleDatabase = AnyPgDatabase | SyncSQLiteDatabase | AnyMysqlDatabase;

export type Dialect = 'sqlite' | 'postgres' | 'mysql';

export type DetectedDatabase =
  | { dialect: 'postgres'; db: AnyPgDatabase }
  | { dialect: 'sqlite'; db: SyncSQLiteDatabase }
  | { dialect: 'mysql'; db: AnyMysqlDatabase };

export function detectDialect(db: unknown): DetectedDatabase {
  if (is(db, PgDatabase)) return { dialect: 'postgres', db: db as AnyPgDatabase };
  if (is(db, MySqlDatabase)) return { dialect: 'mysql', db: db as AnyMysqlDatabase };
  if (is(db, BaseSQLiteDatabase)) {
    // `resultKind` is not in drizzle's public types; it is how drizzle itself tells sync from async.
    const { resultKind } = db as unknown as { resultKind?: string };
    if (resultKind !== 'sync') {
      throw new TypeError(
        '[idem] this SQLite driver is asynchronous; the store needs a synchronous one (drizzle-orm/better-sqlite3) so that its transactions stay atomic',
      );
    }
    return { dialect: 'sqlite', db: db as SyncSQLiteDatabase };
  }
  throw new TypeError('[idem] unsupported database: pass a drizzle instance for PostgreSQL (node-postgres, PGlite), SQLite (better-sqlite3) or MySQL (mysql2)');
}
