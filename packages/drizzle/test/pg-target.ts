/**
 * Where the PostgreSQL tests run: a fresh schema on the server at `DATABASE_URL` (default
 * `postgres://postgres@127.0.0.1:5432/test`), dropped on `close()`. When the server is
 * unreachable the tests run on PGlite (in-process PostgreSQL) so `npm test` passes on a laptop,
 * unless `IDEM_REQUIRE_POSTGRES=1`, which turns an unreachable server into a failure.
 * Cross-package tests import this file too.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { drizzle as drizzleNodePostgres } from 'drizzle-orm/node-postgres';
import type { Logger } from 'drizzle-orm';
import type { PgDatabase, PgQueryResultHKT } from 'drizzle-orm/pg-core';

export const DEFAULT_DATABASE_URL = 'postgres://postgres@127.0.0.1:5432/test';

export interface PostgresTarget {
  /** `server`: a real PostgreSQL; `pglite`: the in-process fallback (one connection, one process). */
  kind: 'server' | 'pglite';
  db: PgDatabase<PgQueryResultHKT, any, any>;
  /** The pool behind `db` (server only). */
  pool?: pg.Pool;
  /** A connection string whose connections land in `schema` (server only): hand it to child processes. */
  url?: string;
  /** The fresh schema the connections' `search_path` points at. */
  schema: string;
  /** Another drizzle instance over the same connections, with `logger` (to count statements). */
  withLogger(logger: Logger): PgDatabase<PgQueryResultHKT, any, any>;
  /** Ends the connections and drops the schema. */
  close(): Promise<void>;
}

export interface OpenPostgresTargetOptions {
  /** Pool size on a server. Defaults to 10. */
  max?: number;
  /** Schema name prefix. Defaults to `idem_test`. */
  schemaPrefix?: string;
}

/** The server URL under test, from `DATABASE_URL`. */
export function databaseUrl(): string {
  return process.env.DATABASE_URL || DEFAULT_DATABASE_URL;
}

/** Whether `IDEM_REQUIRE_POSTGRES` demands a real server. */
export function postgresRequired(): boolean {
  const value = process.env.IDEM_REQUIRE_POSTGRES;
  return value !== undefined && value !== '' && value !== '0' && value !== 'false';
}

/** Appends `options=-c search_path=<schema>` to a connection string. */
export function withSearchPath(url: string, schema: string): string {
  const parsed = new URL(url);
  parsed.searchParams.set('options', `-c search_path=${schema}`);
  return parsed.toString();
}

let reachable: Promise<boolean> | undefined;

/** Probes the server once per process. */
export function isServerReachable(url = databaseUrl()): Promise<boolean> {
  reachable ??= (async () => {
    const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000 });
    try {
      await client.connect();
      await client.query('SELECT 1');
      return true;
    } catch {
      return false;
    } finally {
      await client.end().catch(() => {});
    }
  })();
  return reachable;
}

export async function openPostgresTarget({
  max = 10,
  schemaPrefix = 'idem_test',
}: OpenPostgresTargetOptions = {}): Promise<PostgresTarget> {
  const schema = `${schemaPrefix}_${randomBytes(6).toString('hex')}`;
  const url = databaseUrl();
  if (await isServerReachable(url)) return openServer(url, schema, max);
  if (postgresRequired()) {
    throw new Error(`[idem] IDEM_REQUIRE_POSTGRES is set but PostgreSQL at ${redact(url)} is unreachable`);
  }
  return openPglite(schema);
}

async function openServer(url: string, schema: string, max: number): Promise<PostgresTarget> {
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  try {
    await admin.query(`CREATE SCHEMA "${schema}"`);
  } finally {
    await admin.end();
  }
  const schemaUrl = withSearchPath(url, schema);
  const pool = new pg.Pool({ connectionString: schemaUrl, max });
  return {
    kind: 'server',
    db: drizzleNodePostgres({ client: pool }),
    withLogger: (logger) => drizzleNodePostgres({ client: pool, logger }),
    pool,
    url: schemaUrl,
    schema,
    async close() {
      await pool.end();
      const dropper = new pg.Client({ connectionString: url });
      await dropper.connect();
      try {
        await dropper.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      } finally {
        await dropper.end();
      }
    },
  };
}

async function openPglite(schema: string): Promise<PostgresTarget> {
  // Imported lazily: PGlite loads a WebAssembly PostgreSQL, needless when a server answers.
  const [{ PGlite }, { drizzle }] = await Promise.all([import('@electric-sql/pglite'), import('drizzle-orm/pglite')]);
  const client = new PGlite();
  await client.exec(`CREATE SCHEMA "${schema}"; SET search_path TO "${schema}";`);
  return {
    kind: 'pglite',
    db: drizzle({ client }),
    withLogger: (logger) => drizzle({ client, logger }),
    schema,
    async close() {
      await client.close();
    },
  };
}

function redact(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    return '<invalid DATABASE_URL>';
  }
}
