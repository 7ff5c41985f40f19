/**
 * From a `DATABASE_URL` to a drizzle instance the store accepts: `file:<path>` or a path
 * ending in `.db`/`.sqlite` opens SQLite (better-sqlite3, WAL), `postgres://` or
 * `postgresql://` opens a node-postgres pool, `mysql://` a mysql2 pool. The drivers are optional peer dependencies,
 * imported only when the URL selects them, so a PostgreSQL app does not need better-sqlite3.
 */
import { mkdirSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { BetterSQLite3Database } from 'drizzle-orm/better-sqlite3';
import type { MySql2Database } from 'drizzle-orm/mysql2';
import type { NodePgDatabase } from 'drizzle-orm/node-postgres';

/** Where a `DATABASE_URL` points: a SQLite file, or a PostgreSQL or MySQL connection string. */
export type DatabaseLocation = { dialect: 'sqlite'; path: string } | { dialect: 'postgres'; url: string } | { dialect: 'mysql'; url: string };

/** A `DATABASE_URL` that names no database idem can open; the message is one line. */
export class DatabaseUrlError extends Error {
  override readonly name = 'DatabaseUrlError';
}

export interface ParseDatabaseUrlOptions {
  /** The SQLite file used when the value is unset or empty. Without it, an unset value is an error. */
  defaultSqlitePath?: string;
  /** How the value is called in error messages. Defaults to `DATABASE_URL`. */
  name?: string;
}

/**
 * `file:<path>` (or a `file://` URL) or a path ending in `.db`/`.sqlite` selects SQLite;
 * `postgres://` or `postgresql://` selects PostgreSQL; `mysql://` selects MySQL; unset or empty selects
 * `defaultSqlitePath`. Anything else throws a {@link DatabaseUrlError}.
 */
export function parseDatabaseUrl(value: string | undefined, { defaultSqlitePath, name = 'DATABASE_URL' }: ParseDatabaseUrlOptions = {}): DatabaseLocation {
  if (value === undefined || value.trim() === '') {
    if (defaultSqlitePath !== undefined) return { dialect: 'sqlite', path: defaultSqlitePath };
    throw new DatabaseUrlError(`set ${name} (file:<path>, <path>.db, postgres://…, mysql://…)`);
  }
  const url = value.trim();
  if (/^postgres(ql)?:\/\//i.test(url)) return { dialect: 'postgres', url };
  if (/^mysql:\/\//i.test(url)) return { dialect: 'mysql', url };
  if (url.startsWith('file:')) {
    let path: string;
    try {
      path = url.startsWith('file://') ? fileURLToPath(url) : url.slice('file:'.length);
    } catch (error) {
      throw new DatabaseUrlError(`${name} "${url}" is not a valid file URL: ${(error as Error).message}`);
    }
    if (path === '') throw new DatabaseUrlError(`${name} "file:" names no file`);
    return { dialect: 'sqlite', path };
  }
  if (/\.(db|sqlite)$/i.test(url)) return { dialect: 'sqlite', path: url };
  throw new DatabaseUrlError(`${name} "${url}" is neither postgres://…, postgresql://…, mysql://…, file:<path> nor a path ending in .db or .sqlite`);
}

/**
 * A connection string for messages and logs: its password (in the authority or as a
 * `password` parameter) replaced by `***`, parameters shown decoded
 * (`?options=-c search_path=app`).
 */
export function redactDatabaseUrl(url: string): string {
  try {
    const parsed = new URL(url);
    const credentials = parsed.username ? `${parsed.username}${parsed.password ? ':***' : ''}@` : parsed.password ? ':***@' : '';
    const parameters = [...parsed.searchParams].map(([name, value]) => `${name}=${name.toLowerCase() === 'password' ? '***' : value}`);
    return `${parsed.protocol}//${credentials}${parsed.host}${parsed.pathname}${parameters.length > 0 ? `?${parameters.join('&')}` : ''}`;
  } catch {
    // Not a URL we can parse: show only the scheme, never what might be a password.
    const scheme = /^[a-z][a-z0-9+.-]*:/i.exec(url)?.[0];
    return scheme ? `${scheme}//<unparsable>` : '<unparsable>';
  }
}

export interface OpenDatabaseOptions extends ParseDatabaseUrlOptions {
  /**
   * SQLite: how long a statement waits for another connection's write lock before SQLITE_BUSY.
   * better-sqlite3 waits synchronously, blocking the event loop, so this defaults to 0: the
   * store retries asynchronously instead (`createDrizzleStore`'s `busyRetryMs`), and your own
   * statements on this connection can use `retrySqliteBusy`. Defaults to 0 ms.
   */
  busyTimeoutMs?: number;
  /**
   * SQLite: create the file (and its directory) when missing. Defaults to true; with false a
   * missing file is an error, e.g. for tools that only read.
   */
  create?: boolean;
  /** PostgreSQL, MySQL: the pool size. Defaults to 10. */
  max?: number;
  /** PostgreSQL, MySQL: how long a new connection may take. Defaults to 5000 ms. */
  connectionTimeoutMillis?: number;
}

interface OpenedBase {
  /** The database, for logs and messages: the URL with its password redacted, or `file:<absolute path>`. */
  description: string;
  /** Closes the connection (SQLite) or ends the pool (PostgreSQL, MySQL). */
  close(): Promise<void>;
}

/** An open database: hand `db` to `createDrizzleStore` and `migrate`. */
export type OpenedDatabase =
  | (OpenedBase & { dialect: 'sqlite'; db: BetterSQLite3Database })
  | (OpenedBase & { dialect: 'postgres'; db: NodePgDatabase })
  | (OpenedBase & { dialect: 'mysql'; db: MySql2Database });

const DEFAULT_BUSY_TIMEOUT_MS = 0;
const DEFAULT_CONNECTION_TIMEOUT_MS = 5000;

/** How {@link openDatabase} describes a database: `file:<absolute path>`, or the redacted URL. */
export function describeDatabase(location: DatabaseLocation): string {
  if (location.dialect !== 'sqlite') return redactDatabaseUrl(location.url);
  return location.path === ':memory:' ? 'file::memory:' : `file:${resolve(location.path)}`;
}

/**
 * Opens the database a `DATABASE_URL` (or a parsed {@link DatabaseLocation}) names.
 * SQLite: better-sqlite3 in WAL mode with `busy_timeout = 0` (see `busyTimeoutMs`), creating the file's directory if
 * missing. PostgreSQL: a `pg.Pool`; MySQL: a mysql2 pool; both connect on first use (so an
 * unreachable server shows up on the first query, not here).
 */
export async function openDatabase(target: string | DatabaseLocation | undefined, options: OpenDatabaseOptions = {}): Promise<OpenedDatabase> {
  const location = typeof target === 'object' ? target : parseDatabaseUrl(target, options);
  if (location.dialect === 'mysql') return openMysql(location.url, options);
  return location.dialect === 'sqlite' ? openSqlite(location.path, options) : openPostgres(location.url, options);
}

async function openSqlite(path: string, { busyTimeoutMs = DEFAULT_BUSY_TIMEOUT_MS, create = true }: OpenDatabaseOptions): Promise<OpenedDatabase> {
  const [{ default: Database }, { drizzle }] = await Promise.all([
    importDriver(() => import('better-sqlite3'), 'better-sqlite3', 'SQLite', 'better-sqlite3@^12'),
    importDriver(() => import('drizzle-orm/better-sqlite3'), 'better-sqlite3', 'SQLite', 'better-sqlite3@^12'),
  ]);
  const file = path === ':memory:' ? path : resolve(path);
  if (create && file !== ':memory:') mkdirSync(dirname(file), { recursive: true });
  const client = new Database(file, { timeout: busyTimeoutMs, fileMustExist: !create });
  try {
    client.pragma('journal_mode = WAL');
    client.pragma(`busy_timeout = ${Math.max(0, Math.trunc(busyTimeoutMs))}`);
  } catch (error) {
    client.close();
    throw error;
  }
  return {
    dialect: 'sqlite',
    db: drizzle(client),
    description: describeDatabase({ dialect: 'sqlite', path }),
    async close() {
      if (client.open) client.close();
    },
  };
}

async function openPostgres(url: string, { max = 10, connectionTimeoutMillis = DEFAULT_CONNECTION_TIMEOUT_MS }: OpenDatabaseOptions): Promise<OpenedDatabase> {
  const [{ default: pg }, { drizzle }] = await Promise.all([
    importDriver(() => import('pg'), 'pg', 'PostgreSQL', 'pg@^8'),
    importDriver(() => import('drizzle-orm/node-postgres'), 'pg', 'PostgreSQL', 'pg@^8'),
  ]);
  const pool = new pg.Pool({ connectionString: url, max, connectionTimeoutMillis });
  // An idle connection that drops (server restart, network) must not crash the process: the
  // pool discards it and the next query opens a new one.
  pool.on('error', () => {});
  // A connection checked out of the pool (a transaction in atomic mode holds one while the
  // handler runs) emits 'error' on the client when it drops: the query in flight rejects
  // anyway, so the event must not become an uncaught exception that ends the process.
  pool.on('connect', (client) => client.on('error', () => {}));
  let ended = false;
  return {
    dialect: 'postgres',
    db: drizzle(pool),
    description: redactDatabaseUrl(url),
    async close() {
      if (ended) return;
      ended = true;
      await pool.end();
    },
  };
}

async function openMysql(url: string, { max = 10, connectionTimeoutMillis = DEFAULT_CONNECTION_TIMEOUT_MS }: OpenDatabaseOptions): Promise<OpenedDatabase> {
  const [mysql, { drizzle }] = await Promise.all([
    importDriver(() => import('mysql2/promise'), 'mysql2', 'MySQL', 'mysql2@^3'),
    importDriver(() => import('drizzle-orm/mysql2'), 'mysql2', 'MySQL', 'mysql2@^3'),
  ]);
  const pool = mysql.createPool({ uri: url, connectionLimit: max, connectTimeout: connectionTimeoutMillis });
  let ended = false;
  return {
    dialect: 'mysql',
    db: drizzle(pool),
    description: redactDatabaseUrl(url),
    async close() {
      if (ended) return;
      ended = true;
      await pool.end();
    },
  };
}

async function importDriver<T>(load: () => Promise<T>, driver: string, database: string, install: string): Promise<T> {
  try {
    return await load();
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    if ((code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') && String((error as Error).message).includes(`'${driver}'`)) {
      throw new Error(`[idem] ${database} needs the ${driver} package, which is not installed: npm install ${install}`);
    }
    throw error;
  }
}
