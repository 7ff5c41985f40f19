/**
 * A SQLite database file in WAL mode in a fresh temporary directory, removed on `close()`.
 * Other processes may open `file` too (WAL: one writer, readers never blocked).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { drizzle, type BetterSQLite3Database } from 'drizzle-orm/better-sqlite3';

/** How long a connection waits for the write lock before SQLITE_BUSY. */
export const BUSY_TIMEOUT_MS = 5000;

export interface SqliteTarget {
  db: BetterSQLite3Database;
  client: Database.Database;
  /** The database file, for other connections and processes. */
  file: string;
  close(): Promise<void>;
}

/** Opens a connection to `file` the way the store expects it: WAL and a generous busy timeout. */
export function openSqliteConnection(file: string): { client: Database.Database; db: BetterSQLite3Database } {
  const client = new Database(file, { timeout: BUSY_TIMEOUT_MS });
  client.pragma('journal_mode = WAL');
  client.pragma(`busy_timeout = ${BUSY_TIMEOUT_MS}`);
  return { client, db: drizzle({ client }) };
}

export async function openSqliteTarget(): Promise<SqliteTarget> {
  const directory = mkdtempSync(join(tmpdir(), 'idem-sqlite-'));
  const file = join(directory, 'idem.db');
  const { client, db } = openSqliteConnection(file);
  return {
    db,
    client,
    file,
    async close() {
      if (client.open) client.close();
      rmSync(directory, { recursive: true, force: true });
    },
  };
}
