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
import pg from 'pg';
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
