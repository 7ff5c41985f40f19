/**
 * The databases a benchmark runs on, opened with `openDatabase` as an app would (SQLite: a file
 * in WAL mode; PostgreSQL: a pool on 127.0.0.1), each in its own temporary file or schema,
 * migrated, and removed on `close()`.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type Database from 'better-sqlite3';
import type { BetterSQLite3Database } from 'drizzle-orm/better-sqlite3';
import type { NodePgDatabase } from 'drizzle-orm/node-postgres';
import type { Client as LibsqlClient } from '@libsql/client';
import type { LibSQLDatabase } from 'drizzle-orm/libsql';
import type { PostgresJsDatabase } from 'drizzle-orm/postgres-js';
import pg from 'pg';
import type { Sql } from 'postgres';
import { migrate } from '@idem/drizzle';
import { openDatabase } from '@idem/drizzle/connect';

export const POSTGRES_URL = process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/test';
export const REDIS_URL = process.env.REDIS_URL || 'redis://127.0.0.1:6379';

export interface BenchSqlite {
  dialect: 'sqlite';
  /** The database file; other processes may open it (`file:<path>` for `openDatabase`). */
  file: string;
  db: BetterSQLite3Database;
  /** The better-sqlite3 connection behind `db`, for raw statements. */
  client: Database.Database;
  close(): Promise<void>;
}

export interface BenchPostgres {
  dialect: 'postgres';
  /** A connection string whose `search_path` is the fresh schema, for other processes. */
  url: string;
  schema: string;
  db: NodePgDatabase;
  /** The node-postgres pool behind `db`, for raw statements. */
  pool: pg.Pool;
  close(): Promise<void>;
}

/** A migrated SQLite file opened through libsql (`openDatabase` with `driver: 'libsql'`). */
export interface BenchLibsql {
  dialect: 'libsql';
  file: string;
  db: LibSQLDatabase;
  /** The libsql client behind `db`, for raw statements. */
  client: LibsqlClient;
  close(): Promise<void>;
}

/** A migrated fresh schema opened through postgres-js (`openDatabase` with `driver: 'postgres-js'`). */
export interface BenchPostgresJs {
  dialect: 'postgres-js';
  url: string;
  schema: string;
  db: PostgresJsDatabase;
  /** The postgres-js client behind `db`, for raw statements. */
  client: Sql;
  close(): Promise<void>;
}

export type BenchDatabase = BenchSqlite | BenchPostgres;
/** The drivers the floor (part 1) also runs on. */
export type FloorDatabase = BenchDatabase | BenchLibsql | BenchPostgresJs;

/** A migrated SQLite file in a fresh temporary directory. */
export async function openBenchSqlite({ migrated = true }: { migrated?: boolean } = {}): Promise<BenchSqlite> {
  const directory = mkdtempSync(join(tmpdir(), 'idem-bench-'));
  const file = join(directory, 'idem.db');
  const opened = await openDatabase(`file:${file}`);
  if (opened.dialect !== 'sqlite') throw new Error('[bench] expected SQLite');
  if (migrated) await migrate(opened.db);
  return {
    dialect: 'sqlite',
    file,
    db: opened.db as BetterSQLite3Database,
    client: (opened.db as unknown as { $client: Database.Database }).$client,
    async close() {
      await opened.close();
      rmSync(directory, { recursive: true, force: true });
    },
  };
}

/**
 * A migrated fresh schema on the PostgreSQL server at `DATABASE_URL`. A benchmark never falls
 * back to an in-process PostgreSQL: an unreachable server is an error.
 */
export async function openBenchPostgres({ max = 10, migrated = true }: { max?: number; migrated?: boolean } = {}): Promise<BenchPostgres> {
  const schema = `idem_bench_${randomBytes(5).toString('hex')}`;
  await adminQuery(`CREATE SCHEMA "${schema}"`);
  const url = withSearchPath(POSTGRES_URL, schema);
  const opened = await openDatabase(url, { max });
  if (opened.dialect !== 'postgres') throw new Error('[bench] expected PostgreSQL');
  try {
    if (migrated) await migrate(opened.db);
  } catch (error) {
    await opened.close();
    await adminQuery(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    throw error;
  }
  return {
    dialect: 'postgres',
    url,
    schema,
    db: opened.db as NodePgDatabase,
    pool: (opened.db as unknown as { $client: pg.Pool }).$client,
    async close() {
      await opened.close();
      await adminQuery(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    },
  };
}

/** A migrated SQLite file in a fresh temporary directory, through libsql. */
export async function openBenchLibsql(): Promise<BenchLibsql> {
  const directory = mkdtempSync(join(tmpdir(), 'idem-bench-'));
  const file = join(directory, 'idem.db');
  const opened = await openDatabase(`file:${file}`, { driver: 'libsql' });
  await migrate(opened.db);
  return {
    dialect: 'libsql',
    file,
    db: opened.db as LibSQLDatabase,
    client: (opened.db as unknown as { $client: LibsqlClient }).$client,
    async close() {
      await opened.close();
      rmSync(directory, { recursive: true, force: true });
    },
  };
}

/** A migrated fresh schema on the PostgreSQL server at `DATABASE_URL`, through postgres-js. */
export async function openBenchPostgresJs({ max = 10 }: { max?: number } = {}): Promise<BenchPostgresJs> {
  const schema = `idem_bench_${randomBytes(5).toString('hex')}`;
  await adminQuery(`CREATE SCHEMA "${schema}"`);
  const url = withSearchPath(POSTGRES_URL, schema);
  const opened = await openDatabase(url, { max, driver: 'postgres-js' });
  const drop = async () => {
    await opened.close();
    await adminQuery(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  };
  try {
    await migrate(opened.db);
  } catch (error) {
    await drop();
    throw error;
  }
  return { dialect: 'postgres-js', url, schema, db: opened.db as PostgresJsDatabase, client: (opened.db as unknown as { $client: Sql }).$client, close: drop };
}

/** Whether PostgreSQL answers at `DATABASE_URL`. */
export async function postgresReachable(): Promise<boolean> {
  try {
    await adminQuery('SELECT 1');
    return true;
  } catch {
    return false;
  }
}

/** Runs one statement on its own connection, outside any bench schema. */
export async function adminQuery(text: string): Promise<pg.QueryResult> {
  const client = new pg.Client({ connectionString: POSTGRES_URL, connectionTimeoutMillis: 3000 });
  await client.connect();
  try {
    return await client.query(text);
  } finally {
    await client.end();
  }
}

function withSearchPath(url: string, schema: string): string {
  const parsed = new URL(url);
  parsed.searchParams.set('options', `-c search_path=${schema}`);
  return parsed.toString();
}
