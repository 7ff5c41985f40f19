/**
 * The databases a benchmark runs on, opened with `openDatabase` as an app would (SQLite: a file
 * in WAL mode; PostgreSQL, MySQL: a pool on 127.0.0.1), each in its own temporary file, schema
 * or database, migrated, and removed on `close()`.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type Database from 'better-sqlite3';
import type { Client as LibsqlClient } from '@libsql/client';
import type { BetterSQLite3Database } from 'drizzle-orm/better-sqlite3';
import type { LibSQLDatabase } from 'drizzle-orm/libsql';
import type { MySql2Database } from 'drizzle-orm/mysql2';
import type { NodePgDatabase } from 'drizzle-orm/node-postgres';
import type { PostgresJsDatabase } from 'drizzle-orm/postgres-js';
import mysql from 'mysql2/promise';
import pg from 'pg';
import type { Sql } from 'postgres';
import { migrate } from '@idem/drizzle';
import { openDatabase } from '@idem/drizzle/connect';

export const POSTGRES_URL = process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/test';
export const MYSQL_URL = process.env.MYSQL_URL || 'mysql://root@127.0.0.1:3306/test';
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

export interface BenchMysql {
  dialect: 'mysql';
  /** A connection string for the fresh database. */
  url: string;
  database: string;
  db: MySql2Database;
  /** The mysql2 pool behind `db`, for raw statements. */
  pool: mysql.Pool;
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
export async function openBenchPostgres({
  max = 10,
  migrated = true,
}: {
  max?: number;
  migrated?: boolean;
} = {}): Promise<BenchPostgres> {
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
  return {
    dialect: 'postgres-js',
    url,
    schema,
    db: opened.db as PostgresJsDatabase,
    client: (opened.db as unknown as { $client: Sql }).$client,
    close: drop,
  };
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

/** A migrated fresh database on the MySQL server at `MYSQL_URL`. */
export async function openBenchMysql({ max = 10 }: { max?: number } = {}): Promise<BenchMysql> {
  const database = `idem_bench_${randomBytes(5).toString('hex')}`;
  await mysqlAdminQuery(`CREATE DATABASE \`${database}\``);
  const parsed = new URL(MYSQL_URL);
  parsed.pathname = `/${database}`;
  const url = parsed.toString();
  const opened = await openDatabase(url, { max });
  if (opened.dialect !== 'mysql') throw new Error('[bench] expected MySQL');
  const drop = () => mysqlAdminQuery(`DROP DATABASE IF EXISTS \`${database}\``);
  try {
    await migrate(opened.db);
  } catch (error) {
    await opened.close();
    await drop();
    throw error;
  }
  return {
    dialect: 'mysql',
    url,
    database,
    db: opened.db as MySql2Database,
    pool: (opened.db as unknown as { $client: mysql.Pool }).$client,
    async close() {
      await opened.close();
      await drop();
    },
  };
}

/** The MySQL server's version (`SELECT VERSION()`), or undefined when it does not answer at `MYSQL_URL`. */
export async function mysqlVersion(): Promise<string | undefined> {
  try {
    const [rows] = await mysqlAdminQuery('SELECT VERSION() AS version');
    return String((rows as Array<{ version: unknown }>)[0]?.version);
  } catch {
    return undefined;
  }
}

/** Runs one statement on its own MySQL connection, outside any bench database. */
async function mysqlAdminQuery(text: string) {
  const connection = await mysql.createConnection({ uri: MYSQL_URL, connectTimeout: 3000 });
  try {
    return await connection.query(text);
  } finally {
    await connection.end();
  }
}
