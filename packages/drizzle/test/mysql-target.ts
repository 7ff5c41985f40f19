/**
 * Where the MySQL tests run: a fresh database on the server at `MYSQL_URL` (default
 * `mysql://root@127.0.0.1:3306/test`; MariaDB on this machine), dropped on `close()`. Unlike
 * PostgreSQL there is no in-process fallback: when the server is unreachable the MySQL suites
 * are skipped, unless `IDEM_REQUIRE_MYSQL=1`, which turns an unreachable server into a failure.
 */
import { randomBytes } from 'node:crypto';
import mysql from 'mysql2/promise';
import { drizzle, type MySql2Database } from 'drizzle-orm/mysql2';

export const DEFAULT_MYSQL_URL = 'mysql://root@127.0.0.1:3306/test';

export interface MysqlTarget {
  db: MySql2Database;
  pool: mysql.Pool;
  /** A connection string for the fresh database: hand it to child processes and the CLI. */
  url: string;
  database: string;
  /** Ends the pool and drops the database. */
  close(): Promise<void>;
}

/** The server URL under test, from `MYSQL_URL`. */
export function mysqlUrl(): string {
  return process.env.MYSQL_URL || DEFAULT_MYSQL_URL;
}

/** Whether `IDEM_REQUIRE_MYSQL` demands a reachable server. */
export function mysqlRequired(): boolean {
  const value = process.env.IDEM_REQUIRE_MYSQL;
  return value !== undefined && value !== '' && value !== '0' && value !== 'false';
}

/** `url` with its database (the path) replaced. */
export function withDatabase(url: string, database: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.toString();
}

/**
 * Statements sent through a target's `db` that MariaDB runs but MySQL 8 refuses: `RETURNING`
 * (MariaDB 10.5+ only). The suites run on MariaDB, so this is how they hold the store to MySQL.
 */
export const mariadbOnlyStatements: string[] = [];
const logger = {
  logQuery(query: string) {
    if (/\breturning\b/i.test(query)) mariadbOnlyStatements.push(query);
  },
};

let reachable: Promise<boolean> | undefined;

/** Probes the server once per process. */
export function isMysqlReachable(url = mysqlUrl()): Promise<boolean> {
  reachable ??= (async () => {
    try {
      const connection = await mysql.createConnection({ uri: url, connectTimeout: 3000 });
      try {
        await connection.query('SELECT 1');
        return true;
      } finally {
        await connection.end().catch(() => {});
      }
    } catch {
      return false;
    }
  })();
  return reachable;
}

/**
 * Whether the MySQL suites run: the server answers, or `IDEM_REQUIRE_MYSQL` is set (and the
 * suites then fail on the unreachable server). Otherwise prints why they are skipped.
 */
export async function mysqlSuitesRun(): Promise<boolean> {
  if ((await isMysqlReachable()) || mysqlRequired()) return true;
  console.warn(
    `[idem] MySQL at ${redact(mysqlUrl())} is unreachable: skipping the MySQL suites (set IDEM_REQUIRE_MYSQL=1 to fail instead)`,
  );
  return false;
}

async function admin<T>(run: (connection: mysql.Connection) => Promise<T>): Promise<T> {
  const connection = await mysql.createConnection({ uri: mysqlUrl(), connectTimeout: 3000 });
  try {
    return await run(connection);
  } finally {
    await connection.end();
  }
}

export async function openMysqlTarget({
  connectionLimit = 10,
  prefix = 'idem_test',
}: {
  connectionLimit?: number;
  prefix?: string;
} = {}): Promise<MysqlTarget> {
  const url = mysqlUrl();
  if (!(await isMysqlReachable(url)))
    throw new Error(
      `[idem] MySQL at ${redact(url)} is unreachable${mysqlRequired() ? ' and IDEM_REQUIRE_MYSQL is set' : ''}`,
    );
  const database = `${prefix}_${randomBytes(6).toString('hex')}`;
  await admin((connection) => connection.query(`CREATE DATABASE \`${database}\``));
  const databaseUrl = withDatabase(url, database);
  const pool = mysql.createPool({ uri: databaseUrl, connectionLimit });
  return {
    db: drizzle(pool, { logger }),
    pool,
    url: databaseUrl,
    database,
    async close() {
      await pool.end();
      await admin((connection) => connection.query(`DROP DATABASE IF EXISTS \`${database}\``));
    },
  };
}

function redact(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    return '<invalid MYSQL_URL>';
  }
}
