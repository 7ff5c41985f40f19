/**
 * `migrate(db)`: applies the committed drizzle-kit migrations of the detected dialect with
 * drizzle's own migrator. Safe to run on every start: applied migrations are recorded in the
 * journal table `__idem_migrations` (kept apart from your app's `__drizzle_migrations`), and
 * the SQL itself uses `IF NOT EXISTS`. The SQL is embedded in the module, so a bundled app
 * (Next.js, a serverless function) migrates without the package's folder on disk.
 */
import { createHash } from 'node:crypto';
import { sql } from 'drizzle-orm';
import type { MigrationConfig } from 'drizzle-orm/migrator';
import type { MySqlDialect } from 'drizzle-orm/mysql-core';
import type { PgDialect } from 'drizzle-orm/pg-core';
import type { SQLiteSyncDialect } from 'drizzle-orm/sqlite-core';
import { detectDialect, type AnyMysqlDatabase, type AnyPgDatabase, type DrizzleDatabase } from './dialect.js';
import { migrationsFor } from './migration-files.js';
import { executedRows } from './mysql-store.js';
import { retrySqliteBusy } from './sqlite-busy.js';

export interface MigrateOptions {
  /** The journal table recording applied migrations. Defaults to `__idem_migrations`. */
  migrationsTable?: string;
  /**
   * PostgreSQL only: the schema of the journal table. Defaults to the connection's
   * `current_schema()`, the first schema of its `search_path`, where the tables are created too.
   */
  migrationsSchema?: string;
}

/**
 * The same call as drizzle's `migrate` of `drizzle-orm/node-postgres/migrator`,
 * `drizzle-orm/pglite/migrator`, `drizzle-orm/better-sqlite3/migrator` and
 * `drizzle-orm/mysql2/migrator`, which all hand the
 * migrations to the dialect; calling it directly serves every driver of a dialect without
 * importing any driver.
 */
interface MigratableDatabase<TDialect extends { migrate: (...args: never[]) => unknown }> {
  dialect: TDialect;
  session: Parameters<TDialect['migrate']>[1];
}

/** Creates or updates the store's tables (default names) in the database behind `db`. */
export async function migrate(db: DrizzleDatabase, { migrationsTable = '__idem_migrations', migrationsSchema }: MigrateOptions = {}): Promise<void> {
  const detected = detectDialect(db);
  if (detected.dialect === 'sqlite') {
    const config: MigrationConfig = { migrationsFolder: '', migrationsTable };
    const { dialect, session } = detected.db as unknown as MigratableDatabase<SQLiteSyncDialect>;
    // Another process holding the write lock (starting at the same time, or serving): wait for
    // it without blocking, as the store does; a migration that failed busy rolled back.
    await retrySqliteBusy(() => dialect.migrate(migrationsFor('sqlite'), session, config));
    return;
  }
  if (detected.dialect === 'mysql') {
    await migrateMysql(detected.db, { migrationsFolder: '', migrationsTable });
    return;
  }
  const schema = migrationsSchema ?? (await currentSchema(detected.db));
  const config: MigrationConfig = { migrationsFolder: '', migrationsTable, migrationsSchema: schema };
  const { dialect, session } = detected.db as unknown as MigratableDatabase<PgDialect>;
  // Several processes starting at once on a fresh database race to create the same tables:
  // PostgreSQL lets one `CREATE … IF NOT EXISTS` win and fails the others (duplicate table,
  // or a unique violation in its catalog). The loser rolled back; running again finds the
  // journal of the winner and has nothing left to do.
  await retryConcurrentDdl(() => dialect.migrate(migrationsFor('postgres'), session, config));
}

/** How long `migrate` waits on MySQL for another process's migration to finish. */
const MYSQL_MIGRATION_WAIT_SECONDS = 60;

/**
 * MySQL commits every DDL statement on its own, so drizzle's migrator is not one transaction
 * there: two processes starting at once on a fresh database would both apply the migration and
 * both record it. They take turns instead, under a named lock (`GET_LOCK`, server-wide). The
 * lock belongs to a connection, and a transaction is what pins one connection of the pool.
 */
async function migrateMysql(db: AnyMysqlDatabase, config: MigrationConfig): Promise<void> {
  // MySQL refuses lock names over 64 characters.
  const named = `idem:migrate:${config.migrationsTable}`;
  const lock = named.length <= 64 ? named : `idem:migrate:${createHash('sha256').update(named).digest('base64url')}`;
  await db.transaction(async (tx) => {
    const [answer] = executedRows(await tx.execute(sql`SELECT GET_LOCK(${lock}, ${MYSQL_MIGRATION_WAIT_SECONDS}) AS got`));
    if (Number(answer?.got) !== 1) throw new Error(`[idem] migrate: another process held the MySQL lock ${lock} for ${MYSQL_MIGRATION_WAIT_SECONDS} s`);
    try {
      const { dialect, session } = tx as unknown as MigratableDatabase<MySqlDialect>;
      await dialect.migrate(migrationsFor('mysql'), session, config);
    } finally {
      await tx.execute(sql`SELECT RELEASE_LOCK(${lock})`);
    }
  });
}

const DDL_ATTEMPTS = 5;

/**
 * Runs idempotent DDL (`CREATE … IF NOT EXISTS`, a migrator) again when a concurrent process
 * created the same object first and PostgreSQL failed this one; other errors pass through.
 * Use it for your own start-up DDL next to `migrate()`.
 */
export async function retryConcurrentDdl<T>(run: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await run();
    } catch (error) {
      if (attempt >= DDL_ATTEMPTS || !isConcurrentDdlConflict(error)) throw error;
      await new Promise((resolve) => setTimeout(resolve, 50 + Math.random() * 200 * attempt));
    }
  }
}
/** SQLSTATEs of a concurrent `CREATE … IF NOT EXISTS`: unique_violation, duplicate_table, duplicate_object, duplicate_schema. */
const CONCURRENT_DDL_CODES = new Set(['23505', '42P07', '42710', '42P06']);

function isConcurrentDdlConflict(error: unknown): boolean {
  for (let cause: unknown = error; cause instanceof Error; cause = cause.cause) {
    const code = (cause as { code?: unknown }).code;
    if (typeof code === 'string' && CONCURRENT_DDL_CODES.has(code)) return true;
  }
  return false;
}

async function currentSchema(db: AnyPgDatabase): Promise<string> {
  // node-postgres and PGlite both answer `execute` with `{ rows }`.
  const result = (await db.execute(sql`SELECT current_schema() AS schema`)) as unknown as { rows: Array<{ schema: string | null }> };
  const schema = result.rows[0]?.schema;
  if (!schema) throw new Error('[idem] migrate: the connection has no current schema (empty search_path); set one or pass migrationsSchema');
  return schema;
}
