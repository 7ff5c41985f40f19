/**
 * From a `DATABASE_URL` to a drizzle instance the store accepts. The URL names the dialect,
 * the driver is the first of that dialect's drivers that is installed, or the one `driver`
 * names:
 *
 * - `postgres://` or `postgresql://`: node-postgres (`pg`), else postgres-js (`postgres`);
 * - `file:<path>` or a path ending in `.db`/`.sqlite`: better-sqlite3, else libsql
 *   (`@libsql/client`), on the local file in WAL mode;
 * - `libsql://…` (Turso, sqld): libsql over the network;
 * - `mysql://`: a mysql2 pool.
 *
 * The drivers are optional peer dependencies, imported only when selected, so a PostgreSQL app
 * does not need better-sqlite3.
 */
import { existsSync, mkdirSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sql } from 'drizzle-orm';
import type { AnyMysqlDatabase, AnyPgDatabase, AnySQLiteDatabase } from './dialect.js';

const sqlText = (text: string) => sql.raw(text);

/** The PostgreSQL drivers `openDatabase` can open, in the order it tries them. */
export const POSTGRES_DRIVERS = ['node-postgres', 'postgres-js'] as const;
/** The SQLite drivers `openDatabase` can open a local file with, in the order it tries them. */
export const SQLITE_DRIVERS = ['better-sqlite3', 'libsql'] as const;
export type PostgresDriverName = (typeof POSTGRES_DRIVERS)[number];
export type SqliteDriverName = (typeof SQLITE_DRIVERS)[number];
export type DriverName = PostgresDriverName | SqliteDriverName | 'mysql2';

/**
 * Where a `DATABASE_URL` points: a SQLite file, a remote libsql database, or a PostgreSQL
 * connection string; `driver` when one was asked for.
 */
export type DatabaseLocation =
  | { dialect: 'sqlite'; path: string; driver?: SqliteDriverName }
  | { dialect: 'sqlite'; remote: string; driver: 'libsql' }
  | { dialect: 'postgres'; url: string; driver?: PostgresDriverName }
  | { dialect: 'mysql'; url: string; driver?: 'mysql2' };

/** A `DATABASE_URL` that names no database idem can open; the message is one line. */
export class DatabaseUrlError extends Error {
  override readonly name = 'DatabaseUrlError';
}

export interface ParseDatabaseUrlOptions {
  /** The SQLite file used when the value is unset or empty. Without it, an unset value is an error. */
  defaultSqlitePath?: string;
  /** How the value is called in error messages. Defaults to `DATABASE_URL`. */
  name?: string;
  /**
   * The driver to open the database with, instead of the first installed one of its dialect;
   * a driver of another dialect than the URL's is an error. Defaults to none.
   */
  driver?: DriverName;
}

/**
 * `file:<path>` (or a `file://` URL) or a path ending in `.db`/`.sqlite` selects SQLite;
 * `libsql://` a remote libsql database; `postgres://` or `postgresql://` selects PostgreSQL;
 * unset or empty selects `defaultSqlitePath`. Anything else throws a {@link DatabaseUrlError}.
 */
export function parseDatabaseUrl(
  value: string | undefined,
  { defaultSqlitePath, name = 'DATABASE_URL', driver }: ParseDatabaseUrlOptions = {},
): DatabaseLocation {
  const location = locationOf(value, defaultSqlitePath, name);
  if (driver === undefined) return location;
  const choices: readonly string[] =
    location.dialect === 'postgres'
      ? POSTGRES_DRIVERS
      : location.dialect === 'mysql'
        ? ['mysql2']
        : 'remote' in location
          ? ['libsql']
          : SQLITE_DRIVERS;
  if (!choices.includes(driver)) {
    throw new DatabaseUrlError(
      `driver ${driver} cannot open ${name} "${describeDatabase(location)}": use ${choices.join(' or ')}`,
    );
  }
  return { ...location, driver } as DatabaseLocation;
}

function locationOf(value: string | undefined, defaultSqlitePath: string | undefined, name: string): DatabaseLocation {
  if (value === undefined || value.trim() === '') {
    if (defaultSqlitePath !== undefined) return { dialect: 'sqlite', path: defaultSqlitePath };
    throw new DatabaseUrlError(`set ${name} (file:<path>, <path>.db, postgres://… or postgresql://…, mysql://…)`);
  }
  const url = value.trim();
  if (/^postgres(ql)?:\/\//i.test(url)) return { dialect: 'postgres', url };
  if (/^mysql:\/\//i.test(url)) return { dialect: 'mysql', url };
  if (/^libsql:\/\/./i.test(url)) return { dialect: 'sqlite', remote: url, driver: 'libsql' };
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
  // Redacted: an unsupported URL may still carry a password.
  throw new DatabaseUrlError(
    `${name} "${/^[a-z][a-z0-9+.-]*:/i.test(url) ? redactDatabaseUrl(url) : url}" is neither postgres://…, postgresql://…, mysql://…, libsql://…, file:<path> nor a path ending in .db or .sqlite`,
  );
}

/**
 * A connection string for messages and logs: its password (in the authority or as a
 * `password` parameter) replaced by `***`, parameters shown decoded
 * (`?options=-c search_path=app`).
 */
export function redactDatabaseUrl(url: string): string {
  try {
    const parsed = new URL(url);
    const credentials = parsed.username
      ? `${parsed.username}${parsed.password ? ':***' : ''}@`
      : parsed.password
        ? ':***@'
        : '';
    const parameters = [...parsed.searchParams].map(
      ([name, value]) => `${name}=${name.toLowerCase() === 'password' ? '***' : value}`,
    );
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
   * better-sqlite3 waits synchronously, blocking the event loop, so there this defaults to 0:
   * the store retries asynchronously instead (`createDrizzleStore`'s `busyRetryMs`), and your
   * own statements on this connection can use `retrySqliteBusy`. libsql: defaults to 5000 ms,
   * the wait for other processes (the store queues its own writes within the process, and a
   * statement libsql fails busy keeps its connection locked until it is garbage-collected).
   */
  busyTimeoutMs?: number;
  /**
   * SQLite: create the file (and its directory) when missing. Defaults to true; with false a
   * missing file is an error, e.g. for tools that only read.
   */
  create?: boolean;
  /**
   * SQLite on a local file: the `synchronous` pragma, set on every open. In WAL mode,
   * `'normal'` makes a commit survive the process crashing but not the machine losing power
   * (the WAL is synced at checkpoints), and `'full'` syncs the WAL at every commit: about half
   * the fresh requests per second at one connection on a disk like a cloud VM's
   * (bench/README.md). Defaults to each driver's own setting for a WAL database: `'normal'`
   * on better-sqlite3 (which, left alone, ran a new file's first process with `'full'` and
   * every later one with `'normal'`), `'full'` on libsql. Not for a remote `libsql://` database.
   */
  synchronous?: SqliteSynchronous;
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
  | (OpenedBase & { dialect: 'sqlite'; driver: SqliteDriverName; db: AnySQLiteDatabase })
  | (OpenedBase & { dialect: 'postgres'; driver: PostgresDriverName; db: AnyPgDatabase })
  | (OpenedBase & { dialect: 'mysql'; driver: 'mysql2'; db: AnyMysqlDatabase });

/** SQLite's `synchronous` settings that {@link OpenDatabaseOptions.synchronous} accepts. */
export type SqliteSynchronous = 'normal' | 'full';

/** The pragma's value for `synchronous`, or `fallback` when not given; a TypeError for anything else. */
function synchronousPragma(value: unknown, fallback: SqliteSynchronous): 'NORMAL' | 'FULL' {
  const chosen = value === undefined ? fallback : typeof value === 'string' ? value.toLowerCase() : value;
  if (chosen === 'normal' || chosen === 'full') return chosen === 'normal' ? 'NORMAL' : 'FULL';
  throw new TypeError(`[idem] openDatabase: synchronous must be 'normal' or 'full', got ${JSON.stringify(value)}`);
}

const DEFAULT_BUSY_TIMEOUT_MS = 0;
const DEFAULT_LIBSQL_BUSY_TIMEOUT_MS = 5000;
const DEFAULT_CONNECTION_TIMEOUT_MS = 5000;

/** How {@link openDatabase} describes a database: `file:<absolute path>`, or the redacted URL. */
export function describeDatabase(location: DatabaseLocation): string {
  if (location.dialect !== 'sqlite') return redactDatabaseUrl(location.url);
  if ('remote' in location) return redactDatabaseUrl(location.remote);
  return location.path === ':memory:' ? 'file::memory:' : `file:${resolve(location.path)}`;
}

/**
 * Opens the database a `DATABASE_URL` (or a parsed {@link DatabaseLocation}) names.
 * SQLite: better-sqlite3 in WAL mode with `busy_timeout = 0` (see `busyTimeoutMs`) and `synchronous = NORMAL`
 * (see `synchronous`), creating the file's directory if missing. PostgreSQL: a `pg.Pool`, which connects on first use (so an unreachable server
 * shows up on the first query, not here).
 */
export async function openDatabase(
  target: string | DatabaseLocation | undefined,
  options: OpenDatabaseOptions = {},
): Promise<OpenedDatabase> {
  const location = typeof target === 'object' ? target : parseDatabaseUrl(target, options);
  if (location.dialect === 'mysql') return firstInstalled(['mysql2'], 'MySQL', () => openMysql(location.url, options));
  if (location.dialect === 'postgres') {
    return firstInstalled(location.driver ? [location.driver] : POSTGRES_DRIVERS, 'PostgreSQL', (driver) =>
      driver === 'node-postgres' ? openPostgres(location.url, options) : openPostgresJs(location.url, options),
    );
  }
  if ('remote' in location) {
    if (options.synchronous !== undefined)
      throw new TypeError(
        `[idem] openDatabase: synchronous applies to a local SQLite file; ${describeDatabase(location)} is remote`,
      );
    return openLibsql(location.remote, describeDatabase(location), options);
  }
  // Checked before any driver is loaded or any file created.
  synchronousPragma(options.synchronous, 'normal');
  return firstInstalled(location.driver ? [location.driver] : SQLITE_DRIVERS, 'SQLite', (driver) =>
    driver === 'better-sqlite3' ? openSqlite(location.path, options) : openLocalLibsql(location.path, options),
  );
}

/** What each driver needs installed, for the message when none is. */
const PACKAGES: Record<DriverName, string> = {
  'node-postgres': 'pg@^8',
  'postgres-js': 'postgres@^3',
  'better-sqlite3': 'better-sqlite3@^12',
  libsql: '@libsql/client',
  mysql2: 'mysql2@^3',
};

/** `open` with the first of `drivers` that is installed; when none is, one line naming them. */
async function firstInstalled<D extends DriverName>(
  drivers: readonly D[],
  database: string,
  open: (driver: D) => Promise<OpenedDatabase>,
): Promise<OpenedDatabase> {
  for (const driver of drivers) {
    try {
      return await open(driver);
    } catch (error) {
      if (!(error instanceof DriverMissingError)) throw error;
    }
  }
  if (drivers.length === 1)
    throw new Error(
      `[idem] ${database} needs the ${drivers[0]} driver, which is not installed: npm install ${PACKAGES[drivers[0]!]}`,
    );
  throw new Error(
    `[idem] ${database} needs one of its drivers, none of which is installed: npm install ${drivers.map((driver) => `${PACKAGES[driver]} (${driver})`).join(' or ')}`,
  );
}

async function openSqlite(
  path: string,
  { busyTimeoutMs = DEFAULT_BUSY_TIMEOUT_MS, create = true, synchronous }: OpenDatabaseOptions,
): Promise<OpenedDatabase> {
  const [{ default: Database }, { drizzle }] = await Promise.all([
    importDriver(() => import('better-sqlite3'), 'better-sqlite3'),
    importDriver(() => import('drizzle-orm/better-sqlite3'), 'better-sqlite3'),
  ]);
  const file = path === ':memory:' ? path : resolve(path);
  if (create && file !== ':memory:') mkdirSync(dirname(file), { recursive: true });
  const client = new Database(file, { timeout: busyTimeoutMs, fileMustExist: !create });
  try {
    client.pragma('journal_mode = WAL');
    client.pragma(`busy_timeout = ${Math.max(0, Math.trunc(busyTimeoutMs))}`);
    // Explicit: better-sqlite3's own default is 'full' for a file that is not yet in WAL mode
    // when opened (a new file) and 'normal' for one that is (SQLITE_DEFAULT_WAL_SYNCHRONOUS=1).
    client.pragma(`synchronous = ${synchronousPragma(synchronous, 'normal')}`);
  } catch (error) {
    client.close();
    throw error;
  }
  return {
    dialect: 'sqlite',
    driver: 'better-sqlite3',
    db: drizzle({ client }),
    description: describeDatabase({ dialect: 'sqlite', path }),
    async close() {
      if (client.open) client.close();
    },
  };
}

/** libsql on a local file, in WAL mode, with a busy timeout for other processes' locks (see `busyTimeoutMs`). */
async function openLocalLibsql(
  path: string,
  { busyTimeoutMs = DEFAULT_LIBSQL_BUSY_TIMEOUT_MS, create = true, synchronous }: OpenDatabaseOptions,
): Promise<OpenedDatabase> {
  const file = path === ':memory:' ? path : resolve(path);
  if (file !== ':memory:') {
    // libsql creates a missing file on open: refuse it first when asked to.
    if (!create && !existsSync(file)) throw new Error(`[idem] no SQLite database at ${file}`);
    if (create) mkdirSync(dirname(file), { recursive: true });
  }
  const opened = await openLibsql(
    file === ':memory:' ? ':memory:' : `file:${file}`,
    describeDatabase({ dialect: 'sqlite', path }),
    { busyTimeoutMs },
  );
  try {
    await opened.db.run(sqlText('PRAGMA journal_mode = WAL'));
    await opened.db.run(sqlText(`PRAGMA synchronous = ${synchronousPragma(synchronous, 'full')}`));
  } catch (error) {
    await opened.close();
    throw error;
  }
  return opened;
}

async function openLibsql(
  url: string,
  description: string,
  { busyTimeoutMs = DEFAULT_LIBSQL_BUSY_TIMEOUT_MS }: OpenDatabaseOptions,
): Promise<OpenedDatabase & { dialect: 'sqlite' }> {
  const [{ createClient }, { drizzle }] = await Promise.all([
    importDriver(() => import('@libsql/client'), 'libsql'),
    importDriver(() => import('drizzle-orm/libsql'), 'libsql'),
  ]);
  // `authToken` (Turso) is read from the URL's query by the client itself.
  const client = createClient({ url, timeout: Math.max(0, Math.trunc(busyTimeoutMs)) });
  return {
    dialect: 'sqlite',
    driver: 'libsql',
    db: drizzle({ client }),
    description,
    async close() {
      client.close();
    },
  };
}

async function openPostgres(
  url: string,
  { max = 10, connectionTimeoutMillis = DEFAULT_CONNECTION_TIMEOUT_MS }: OpenDatabaseOptions,
): Promise<OpenedDatabase> {
  const [{ default: pg }, { drizzle }] = await Promise.all([
    importDriver(() => import('pg'), 'node-postgres'),
    importDriver(() => import('drizzle-orm/node-postgres'), 'node-postgres'),
  ]);
  const pool = new pg.Pool({ connectionString: url, max, connectionTimeoutMillis });
  // An idle connection that drops (server restart, network) must not crash the process: the
  // pool discards it and the next query opens a new one.
  pool.on('error', () => {});
  // A connection checked out of the pool (a transaction in atomic mode holds one while the
  // handler runs) emits 'error' on the client when it drops: the query in flight rejects
  // anyway, so the event must not become an uncaught exception that ends the process.
  pool.on('connect', (client) => client.on('error', () => {}));
  return {
    dialect: 'postgres',
    driver: 'node-postgres',
    db: drizzle({ client: pool }),
    description: redactDatabaseUrl(url),
    close: closeOnce(() => pool.end()),
  };
}

/** postgres-js: its own pool (`max`), connecting on the first query; notices are not printed. */
async function openPostgresJs(
  url: string,
  { max = 10, connectionTimeoutMillis = DEFAULT_CONNECTION_TIMEOUT_MS }: OpenDatabaseOptions,
): Promise<OpenedDatabase> {
  const [{ default: postgres }, { drizzle }] = await Promise.all([
    importDriver(() => import('postgres'), 'postgres-js'),
    importDriver(() => import('drizzle-orm/postgres-js'), 'postgres-js'),
  ]);
  const client = postgres(url, {
    max,
    connect_timeout: Math.max(1, Math.ceil(connectionTimeoutMillis / 1000)),
    onnotice: () => {},
  });
  return {
    dialect: 'postgres',
    driver: 'postgres-js',
    db: drizzle({ client }),
    description: redactDatabaseUrl(url),
    close: closeOnce(() => client.end({ timeout: 5 })),
  };
}

async function openMysql(
  url: string,
  { max = 10, connectionTimeoutMillis = DEFAULT_CONNECTION_TIMEOUT_MS }: OpenDatabaseOptions,
): Promise<OpenedDatabase> {
  const [mysql, { drizzle }] = await Promise.all([
    importDriver(() => import('mysql2/promise'), 'mysql2'),
    importDriver(() => import('drizzle-orm/mysql2'), 'mysql2'),
  ]);
  const pool = mysql.createPool({ uri: url, connectionLimit: max, connectTimeout: connectionTimeoutMillis });
  return {
    dialect: 'mysql',
    driver: 'mysql2',
    db: drizzle({ client: pool }),
    description: redactDatabaseUrl(url),
    close: closeOnce(() => pool.end()),
  };
}

/** A driver (or its drizzle module's import of it) that is not installed. */
class DriverMissingError extends Error {}

/** The module packages each driver's import needs. */
const MODULES: Record<DriverName, string> = {
  'node-postgres': 'pg',
  'postgres-js': 'postgres',
  'better-sqlite3': 'better-sqlite3',
  libsql: '@libsql/client',
  mysql2: 'mysql2',
};

async function importDriver<T>(load: () => Promise<T>, driver: DriverName): Promise<T> {
  try {
    return await load();
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    const module = MODULES[driver];
    if (
      (code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') &&
      String((error as Error).message).includes(`'${module}`)
    )
      throw new DriverMissingError(driver);
    throw error;
  }
}

/** A `close` that ends the connection once, however often it is called. */
function closeOnce(end: () => Promise<unknown>): () => Promise<void> {
  let ended: Promise<void> | undefined;
  return () => {
    ended ??= end().then(() => undefined);
    return ended;
  };
}
