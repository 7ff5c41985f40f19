/**
 * Dialect and driver detection: the drizzle instance says which dialect it speaks and which
 * driver it wraps (by drizzle's entity names, `drizzle-seams.ts`). Only types of drizzle's
 * `pg-core`, `sqlite-core` and `mysql-core` are imported here, never a driver, so a Postgres app
 * does not need better-sqlite3 installed and vice versa.
 */
import type { MySqlDatabase, MySqlQueryResultHKT, PreparedQueryHKTBase } from 'drizzle-orm/mysql-core';
import type { PgDatabase, PgQueryResultHKT } from 'drizzle-orm/pg-core';
import type { BaseSQLiteDatabase } from 'drizzle-orm/sqlite-core';
import { entityKinds } from './drizzle-seams.js';
import { isPgPool } from './owned-transaction.js';

/** Any Postgres drizzle instance: node-postgres, postgres.js, PGlite, … */
export type AnyPgDatabase = PgDatabase<PgQueryResultHKT, any, any>;
/** Any SQLite drizzle instance, synchronous (better-sqlite3) or asynchronous (libsql). */
export type AnySQLiteDatabase = BaseSQLiteDatabase<'sync' | 'async', any, any, any>;
/** A SQLite drizzle instance (or transaction) whose statements answer at once (`sync`) or later (`async`). */
export type SQLiteDatabaseOf<K extends 'sync' | 'async'> = BaseSQLiteDatabase<K, any, any, any>;
/** A synchronous SQLite drizzle instance, such as `drizzle-orm/better-sqlite3`. */
export type SyncSQLiteDatabase = SQLiteDatabaseOf<'sync'>;
/** An asynchronous SQLite drizzle instance, such as `drizzle-orm/libsql`. */
export type AsyncSQLiteDatabase = SQLiteDatabaseOf<'async'>;
/** A SQLite drizzle instance typed by how its driver answers, as detected. */
export type SqliteDatabase =
  | { transactions: 'synchronous'; db: SyncSQLiteDatabase }
  | { transactions: 'asynchronous'; db: AsyncSQLiteDatabase };
/** A MySQL drizzle instance over mysql2 (`drizzle-orm/mysql2`). */
export type AnyMysqlDatabase = MySqlDatabase<MySqlQueryResultHKT, PreparedQueryHKTBase, any, any>;
/** The drizzle instances `createDrizzleStore` and `migrate` accept. */
export type DrizzleDatabase = AnyPgDatabase | AnySQLiteDatabase | AnyMysqlDatabase;

export type Dialect = 'sqlite' | 'postgres' | 'mysql';

/** A driver the store runs on. */
export interface Driver {
  /** As in drizzle's import path: `node-postgres`, `postgres-js`, `pglite`, `better-sqlite3`, `libsql`, … */
  name: string;
  /**
   * `synchronous`: a transaction is one synchronous callback and cannot span an `await`
   * (better-sqlite3), so the store has no atomic mode there. `asynchronous`: a transaction holds
   * its own connection and may await.
   */
  transactions: 'synchronous' | 'asynchronous';
}

export type DetectedDatabase =
  | { dialect: 'postgres'; db: AnyPgDatabase; driver: Driver }
  | { dialect: 'sqlite'; db: AnySQLiteDatabase; driver: Driver; sqlite: SqliteDatabase }
  | { dialect: 'mysql'; db: AnyMysqlDatabase; driver: Driver };

/** Drivers the store runs on, by drizzle's entity name of their database class. */
const DRIVERS: Record<string, { dialect: Dialect } & Driver> = {
  NodePgDatabase: { dialect: 'postgres', name: 'node-postgres', transactions: 'asynchronous' },
  PostgresJsDatabase: { dialect: 'postgres', name: 'postgres-js', transactions: 'asynchronous' },
  PgliteDatabase: { dialect: 'postgres', name: 'pglite', transactions: 'asynchronous' },
  // Untested here (no Neon or Vercel endpoint): both speak the PostgreSQL protocol through a pg-compatible Pool.
  NeonServerlessDatabase: { dialect: 'postgres', name: 'neon-serverless', transactions: 'asynchronous' },
  VercelPgDatabase: { dialect: 'postgres', name: 'vercel-postgres', transactions: 'asynchronous' },
  BetterSQLite3Database: { dialect: 'sqlite', name: 'better-sqlite3', transactions: 'synchronous' },
  LibSQLDatabase: { dialect: 'sqlite', name: 'libsql', transactions: 'asynchronous' },
  MySql2Database: { dialect: 'mysql', name: 'mysql2', transactions: 'asynchronous' },
};

/** Drivers that lack what the store needs, and why. */
const REFUSED: Record<string, string> = {
  NeonHttpDatabase:
    'neon-http has no interactive transactions (drizzle: "No transactions support in neon-http driver"), which the store needs to reuse an expired key (R2) and for atomic mode: use drizzle-orm/neon-serverless (a WebSocket Pool) for the store',
  D1Database:
    "Cloudflare D1 refuses transactions (drizzle's transaction() sends BEGIN, which D1 rejects), which the store needs to reuse an expired key (R2) and for atomic mode",
  PlanetScaleDatabase:
    "PlanetScale's serverless driver answers writes otherwise than mysql2 (the MySQL store reads mysql2's [ResultSetHeader, fields] for affected rows): use drizzle-orm/mysql2",
};

const SUPPORTED = 'PostgreSQL (node-postgres, postgres-js, PGlite), SQLite (better-sqlite3, libsql) or MySQL (mysql2)';
const DIALECT_NAMES: Record<Dialect, string> = { postgres: 'PostgreSQL', sqlite: 'SQLite', mysql: 'MySQL' };

export function detectDialect(db: unknown): DetectedDatabase {
  const kinds = entityKinds(db);
  const dialect: Dialect | undefined =
    kinds.includes('PgDatabase') || kinds.includes('PgAsyncDatabase')
      ? 'postgres'
      : kinds.includes('BaseSQLiteDatabase')
        ? 'sqlite'
        : kinds.includes('MySqlDatabase') || kinds.includes('MySqlAsyncDatabase')
          ? 'mysql'
          : undefined;
  if (dialect === undefined)
    throw new TypeError(`[idem] unsupported database: pass a drizzle instance for ${SUPPORTED}`);
  const [kind] = kinds;
  const refusal = kind === undefined ? undefined : REFUSED[kind];
  if (refusal) throw new TypeError(`[idem] ${refusal}`);
  const known = kind === undefined ? undefined : DRIVERS[kind];
  if (!known || known.dialect !== dialect) {
    throw new TypeError(
      `[idem] unsupported ${DIALECT_NAMES[dialect]} driver (drizzle's ${kind ?? 'unnamed'}): the store runs on ${SUPPORTED}`,
    );
  }
  if (known.name === 'node-postgres' && !isPgPool((db as { $client?: unknown }).$client)) {
    throw new TypeError(
      '[idem] node-postgres: pass a pg.Pool, not a single pg.Client: the store runs transactions (reuse of an expired key, atomic mode) that each need a connection of their own, and on one Client they would interleave',
    );
  }
  const driver: Driver = { name: known.name, transactions: known.transactions };
  if (dialect === 'postgres') return { dialect, db: db as AnyPgDatabase, driver };
  if (dialect === 'mysql') return { dialect, db: db as AnyMysqlDatabase, driver };
  const sqlite: SqliteDatabase =
    driver.transactions === 'synchronous'
      ? { transactions: 'synchronous', db: db as SyncSQLiteDatabase }
      : { transactions: 'asynchronous', db: db as AsyncSQLiteDatabase };
  return { dialect, db: sqlite.db, driver, sqlite };
}
