/**
 * Every driver the store supports, opened on a real engine in a fresh place of its own: a schema
 * on the PostgreSQL server at `DATABASE_URL` (node-postgres, postgres-js), an in-process PGlite,
 * a SQLite file in WAL mode in a temporary directory (better-sqlite3, libsql). The test files
 * are parametrized over {@link DRIVERS}; a child process opens the same database from
 * {@link DriverTarget.child} with {@link openChildStore}.
 *
 * The server drivers are skipped when no server answers, unless `IDEM_REQUIRE_POSTGRES=1`
 * turns that into a failure (CI).
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { sql, type SQL } from 'drizzle-orm';
import { createDrizzleStore, type DrizzleDatabase, type DrizzleStore } from '../src/index.ts';
import { databaseUrl, isServerReachable, postgresRequired, withSearchPath } from './pg-target.ts';

export type DriverName = 'node-postgres' | 'postgres-js' | 'pglite' | 'better-sqlite3' | 'libsql';

/** How another process opens the same database. */
export type ChildTarget =
  | { driver: 'node-postgres' | 'postgres-js' | 'mysql2'; url: string; connections: number }
  | { driver: 'better-sqlite3' | 'libsql'; file: string };

export interface DriverTarget {
  driver: DriverName;
  dialect: 'postgres' | 'sqlite';
  db: DrizzleDatabase;
  /** Runs a query and answers its rows as plain objects, whatever shape the driver gives them. */
  rows<T>(query: SQL): Promise<T[]>;
  /** Runs one statement (DDL). */
  exec(statement: string): Promise<void>;
  /** Another process's way to the same database; none for PGlite, which lives in this process. */
  child?: ChildTarget;
  /** The PostgreSQL schema the connections use (server drivers and PGlite). */
  schema?: string;
  /** The SQLite file (better-sqlite3, libsql). */
  file?: string;
  close(): Promise<void>;
}

export interface OpenOptions {
  /** Connections of a server pool. Defaults to 10. */
  max?: number;
  /** Schema name prefix on a server. Defaults to `idem_test`. */
  schemaPrefix?: string;
}

export interface DriverSpec {
  name: DriverName;
  dialect: 'postgres' | 'sqlite';
  /** Whether this driver can run here: the server drivers need a reachable server (or fail under IDEM_REQUIRE_POSTGRES). */
  runs: boolean;
  open(options?: OpenOptions): Promise<DriverTarget>;
}

const server = (await isServerReachable()) || postgresRequired();

export const DRIVERS: readonly DriverSpec[] = [
  {
    name: 'node-postgres',
    dialect: 'postgres',
    runs: server,
    open: (options) => openServerDriver('node-postgres', options),
  },
  {
    name: 'postgres-js',
    dialect: 'postgres',
    runs: server,
    open: (options) => openServerDriver('postgres-js', options),
  },
  { name: 'pglite', dialect: 'postgres', runs: true, open: () => openPglite() },
  { name: 'better-sqlite3', dialect: 'sqlite', runs: true, open: () => openSqliteFile('better-sqlite3') },
  { name: 'libsql', dialect: 'sqlite', runs: true, open: () => openSqliteFile('libsql') },
];

/** The driver specs of one name (for a test that needs one driver). */
export function driverSpec(name: DriverName): DriverSpec {
  return DRIVERS.find((spec) => spec.name === name)!;
}

/** `result` of `db.execute()` as rows: node-postgres and PGlite answer `{ rows }`, postgres-js the rows themselves. */
export function rowsOfResult<T>(result: unknown): T[] {
  return (Array.isArray(result) ? result : (result as { rows: T[] }).rows) as T[];
}

async function adminQuery(text: string): Promise<void> {
  const admin = new pg.Client({ connectionString: databaseUrl() });
  await admin.connect();
  try {
    await admin.query(text);
  } finally {
    await admin.end();
  }
}

async function openServerDriver(
  driver: 'node-postgres' | 'postgres-js',
  { max = 10, schemaPrefix = 'idem_test' }: OpenOptions = {},
): Promise<DriverTarget> {
  if (!(await isServerReachable()))
    throw new Error(`[idem] IDEM_REQUIRE_POSTGRES is set but PostgreSQL at ${databaseUrl()} is unreachable`);
  const schema = `${schemaPrefix}_${randomBytes(6).toString('hex')}`;
  await adminQuery(`CREATE SCHEMA "${schema}"`);
  const url = withSearchPath(databaseUrl(), schema);
  const { db, end } = await connectPostgres(driver, url, max);
  return {
    driver,
    dialect: 'postgres',
    db,
    rows: async (query) =>
      rowsOfResult((await (db as import('drizzle-orm/pg-core').PgDatabase<any>).execute(query)) as unknown),
    exec: async (statement) =>
      void (await (db as import('drizzle-orm/pg-core').PgDatabase<any>).execute(sql.raw(statement))),
    child: { driver, url, connections: 8 },
    schema,
    async close() {
      await end();
      await adminQuery(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    },
  };
}

/** A drizzle instance over a new pool of `driver` at `url`, and how to end it. */
export async function connectPostgres(
  driver: 'node-postgres' | 'postgres-js',
  url: string,
  max: number,
): Promise<{ db: DrizzleDatabase; end(): Promise<void> }> {
  if (driver === 'node-postgres') {
    const { drizzle } = await import('drizzle-orm/node-postgres');
    const pool = new pg.Pool({ connectionString: url, max });
    return { db: drizzle({ client: pool }), end: () => pool.end() };
  }
  const [{ default: postgres }, { drizzle }] = await Promise.all([
    import('postgres'),
    import('drizzle-orm/postgres-js'),
  ]);
  const client = postgres(url, { max, onnotice: () => {} });
  return { db: drizzle({ client }), end: () => client.end({ timeout: 5 }) };
}

async function openPglite(): Promise<DriverTarget> {
  const [{ PGlite }, { drizzle }] = await Promise.all([import('@electric-sql/pglite'), import('drizzle-orm/pglite')]);
  const schema = `idem_test_${randomBytes(6).toString('hex')}`;
  const client = new PGlite();
  await client.exec(`CREATE SCHEMA "${schema}"; SET search_path TO "${schema}";`);
  const db = drizzle({ client });
  return {
    driver: 'pglite',
    dialect: 'postgres',
    db,
    rows: async (query) => rowsOfResult(await db.execute(query)),
    exec: async (statement) => void (await db.execute(sql.raw(statement))),
    schema,
    async close() {
      await client.close();
    },
  };
}

async function openSqliteFile(driver: 'better-sqlite3' | 'libsql'): Promise<DriverTarget> {
  const directory = mkdtempSync(join(tmpdir(), `idem-${driver}-`));
  const file = join(directory, 'idem.db');
  const { db, end } = await connectSqlite(driver, file);
  const sqlite = db as import('drizzle-orm/sqlite-core').BaseSQLiteDatabase<'sync' | 'async', unknown>;
  return {
    driver,
    dialect: 'sqlite',
    db,
    rows: async (query) => (await sqlite.all(query)) as never,
    exec: async (statement) => void (await sqlite.run(sql.raw(statement))),
    child: { driver, file },
    file,
    async close() {
      await end();
      rmSync(directory, { recursive: true, force: true });
    },
  };
}

/**
 * A drizzle instance on the SQLite file in WAL mode (one writer, readers never blocked), as
 * `openDatabase` opens it. better-sqlite3: `busy_timeout` 0, so a locked database answers
 * SQLITE_BUSY at once and the store retries without blocking the event loop. libsql: a busy
 * timeout of 5 s for other processes' locks (the store queues its own writes in the process).
 */
export async function connectSqlite(
  driver: 'better-sqlite3' | 'libsql',
  file: string,
): Promise<{ db: DrizzleDatabase; end(): Promise<void> }> {
  if (driver === 'better-sqlite3') {
    const [{ default: Database }, { drizzle }] = await Promise.all([
      import('better-sqlite3'),
      import('drizzle-orm/better-sqlite3'),
    ]);
    const client = new Database(file, { timeout: 0 });
    client.pragma('journal_mode = WAL');
    return { db: drizzle({ client }), end: async () => void (client.open && client.close()) };
  }
  const [{ createClient }, { drizzle }] = await Promise.all([import('@libsql/client'), import('drizzle-orm/libsql')]);
  const client = createClient({ url: `file:${file}`, timeout: 5000 });
  await client.execute('PRAGMA journal_mode = WAL');
  return { db: drizzle({ client }), end: async () => client.close() };
}

/** A drizzle instance over a new mysql2 pool at `url` (the MySQL suites' server, mysql-target.ts). */
async function connectMysql(
  url: string,
  connectionLimit: number,
): Promise<{ db: DrizzleDatabase; end(): Promise<void> }> {
  const [{ default: mysql }, { drizzle }] = await Promise.all([import('mysql2/promise'), import('drizzle-orm/mysql2')]);
  const pool = mysql.createPool({ uri: url, connectionLimit });
  return { db: drizzle({ client: pool }), end: () => pool.end() };
}

/** A store in another process on the database `target` names (race-child.ts), and how to close it. */
export async function openChildStore(
  target: ChildTarget,
  { groupCommit = true }: { groupCommit?: boolean } = {},
): Promise<{ store: DrizzleStore; close(): Promise<void> }> {
  const opened =
    'file' in target
      ? await connectSqlite(target.driver, target.file)
      : target.driver === 'mysql2'
        ? await connectMysql(target.url, target.connections)
        : await connectPostgres(target.driver, target.url, target.connections);
  const store = createDrizzleStore(opened.db, { groupCommit });
  if (!('file' in target)) {
    // Open every connection before the race, so that claims race, not handshakes.
    await Promise.all(Array.from({ length: target.connections }, () => store.ping()));
  }
  return { store, close: opened.end };
}
