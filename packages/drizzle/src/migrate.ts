/**
 * `migrate(db)`: applies the committed drizzle-kit migrations of the detected dialect. Safe to
 * run on every start: applied migrations are recorded in the journal table `__idem_migrations`
 * (kept apart from your app's `__drizzle_migrations`, in the format drizzle's migrator writes),
 * and the SQL itself uses `IF NOT EXISTS` (on SQLite and MySQL, which have none for a new column,
 * a column that exists already is not added again). The SQL is embedded in the module, so a bundled app
 * (Next.js, a serverless function) migrates without the package's folder on disk. It runs
 * through drizzle's public API only (a transaction, `execute` / `run`, a `select`), so every
 * driver of a dialect and every supported drizzle version take the same path.
 */
import { createHash } from 'node:crypto';
import { sql, type SQL } from 'drizzle-orm';
import type { MigrationMeta } from 'drizzle-orm/migrator';
import {
  detectDialect,
  type AnyMysqlDatabase,
  type AnyPgDatabase,
  type DrizzleDatabase,
  type SqliteDatabase,
} from './dialect.js';
import { migrationsFor } from './migration-files.js';
import { executedRows } from './dialect-rows.js';
import { openTransaction } from './owned-transaction.js';
import { retrySqliteBusy } from './sqlite/busy.js';

export interface MigrateOptions {
  /** The journal table recording applied migrations. Defaults to `__idem_migrations`. */
  migrationsTable?: string;
  /**
   * PostgreSQL only: the schema of the journal table. Defaults to the connection's
   * `current_schema()`, the first schema of its `search_path`, where the tables are created too.
   */
  migrationsSchema?: string;
}

/** Creates or updates the store's tables (default names) in the database behind `db`. */
export async function migrate(
  db: DrizzleDatabase,
  { migrationsTable = '__idem_migrations', migrationsSchema }: MigrateOptions = {},
): Promise<void> {
  const detected = detectDialect(db);
  if (detected.dialect === 'sqlite') {
    // Another process holding the write lock (starting at the same time, or serving): wait for
    // it without blocking, as the store does; a migration that failed busy rolled back.
    await retrySqliteBusy(() => migrateSqlite(detected.sqlite, migrationsFor('sqlite'), migrationsTable));
    return;
  }
  if (detected.dialect === 'mysql') {
    await migrateMysql(detected.db, migrationsFor('mysql'), migrationsTable);
    return;
  }
  const schema = migrationsSchema ?? (await currentSchema(detected.db));
  // Concurrent migrators queue on an advisory lock inside the transaction; what is left for
  // retryConcurrentDdl is the rare catalog race of objects created outside it.
  await retryConcurrentDdl(() => migratePostgres(detected.db, migrationsFor('postgres'), migrationsTable, schema));
}

/** The migrations newer than the journal's last entry (drizzle's rule: by their folder time). */
function pending(migrations: readonly MigrationMeta[], lastCreatedAt: unknown): MigrationMeta[] {
  return lastCreatedAt === undefined || lastCreatedAt === null
    ? [...migrations]
    : migrations.filter((migration) => Number(lastCreatedAt) < migration.folderMillis);
}

async function migratePostgres(
  db: AnyPgDatabase,
  migrations: readonly MigrationMeta[],
  table: string,
  schema: string,
): Promise<void> {
  const journal = sql`${sql.identifier(schema)}.${sql.identifier(table)}`;
  await openTransaction(db, async (tx) => {
    await tx.execute(sql`SELECT pg_advisory_xact_lock(hashtextextended(${`idem:migrate:${schema}.${table}`}, 0))`);
    await tx.execute(sql`CREATE SCHEMA IF NOT EXISTS ${sql.identifier(schema)}`);
    await tx.execute(
      sql`CREATE TABLE IF NOT EXISTS ${journal} (id SERIAL PRIMARY KEY, hash text NOT NULL, created_at bigint)`,
    );
    const [last] = await tx
      .select({ createdAt: sql<unknown>`created_at` })
      .from(journal)
      .orderBy(sql`created_at DESC`)
      .limit(1);
    for (const migration of pending(migrations, last?.createdAt)) {
      for (const statement of migration.sql) await tx.execute(sql.raw(statement));
      await tx.execute(
        sql`INSERT INTO ${journal} ("hash", "created_at") VALUES (${migration.hash}, ${migration.folderMillis})`,
      );
    }
  });
}

/** How long `migrate` waits on MySQL for another process's migration to finish. */
const MYSQL_MIGRATION_WAIT_SECONDS = 60;

/**
 * MySQL commits every DDL statement on its own, so a migration is not one transaction there:
 * two processes starting at once on a fresh database would both apply the migration and both
 * record it. They take turns instead, under a named lock (`GET_LOCK`, server-wide). The lock
 * belongs to a connection, and a transaction is what pins one connection of the pool.
 */
async function migrateMysql(db: AnyMysqlDatabase, migrations: readonly MigrationMeta[], table: string): Promise<void> {
  // MySQL refuses lock names over 64 characters.
  const named = `idem:migrate:${table}`;
  const lock = named.length <= 64 ? named : `idem:migrate:${createHash('sha256').update(named).digest('base64url')}`;
  const journal = sql.identifier(table);
  await openTransaction(db, async (tx) => {
    const [answer] = executedRows(
      'mysql',
      await tx.execute(sql`SELECT GET_LOCK(${lock}, ${MYSQL_MIGRATION_WAIT_SECONDS}) AS got`),
    );
    if (Number(answer?.got) !== 1)
      throw new Error(
        `[idem] migrate: another process held the MySQL lock ${lock} for ${MYSQL_MIGRATION_WAIT_SECONDS} s`,
      );
    try {
      await tx.execute(
        sql`CREATE TABLE IF NOT EXISTS ${journal} (id serial PRIMARY KEY, hash text NOT NULL, created_at bigint)`,
      );
      const [last] = await tx
        .select({ createdAt: sql<unknown>`created_at` })
        .from(sql`${journal}`)
        .orderBy(sql`created_at DESC`)
        .limit(1);
      for (const migration of pending(migrations, last?.createdAt)) {
        for (const statement of migration.sql) {
          const adds = addedColumn(statement);
          if (adds && executedRows('mysql', await tx.execute(mysqlColumnExists(adds))).length > 0) continue;
          await tx.execute(sql.raw(statement));
        }
        await tx.execute(
          sql`INSERT INTO ${journal} (\`hash\`, \`created_at\`) VALUES (${migration.hash}, ${migration.folderMillis})`,
        );
      }
    } finally {
      await tx.execute(sql`SELECT RELEASE_LOCK(${lock})`);
    }
  });
}

/**
 * In one `BEGIN IMMEDIATE` transaction: the journal's last entry, then the statements of every
 * newer migration and their journal entries. better-sqlite3 runs a transaction as one synchronous
 * call (a callback that returns a promise is refused), libsql's awaits.
 */
function migrateSqlite({ transactions, db }: SqliteDatabase, migrations: readonly MigrationMeta[], table: string) {
  const journal = sql`${sql.identifier(table)}`;
  const createJournal = sql`CREATE TABLE IF NOT EXISTS ${journal} (id SERIAL PRIMARY KEY, hash text NOT NULL, created_at numeric)`;
  const lastApplied = sql`SELECT created_at AS "createdAt" FROM ${journal} ORDER BY created_at DESC LIMIT 1`;
  const immediate = { behavior: 'immediate' } as const;
  if (transactions === 'synchronous')
    return openTransaction(
      db,
      (tx) => {
        tx.run(createJournal);
        const [last] = tx.all<{ createdAt: unknown }>(lastApplied);
        for (const { statement, adds } of statementsAfter(migrations, last?.createdAt, journal))
          if (!adds || tx.all(sqliteColumnExists(adds)).length === 0) tx.run(statement);
      },
      immediate,
    );
  return openTransaction(
    db,
    async (tx) => {
      await tx.run(createJournal);
      const [last] = await tx.all<{ createdAt: unknown }>(lastApplied);
      for (const { statement, adds } of statementsAfter(migrations, last?.createdAt, journal))
        if (!adds || (await tx.all(sqliteColumnExists(adds))).length === 0) await tx.run(statement);
    },
    immediate,
  );
}

/** The statements of the migrations newer than the journal's last entry, each migration followed by its journal entry. */
function statementsAfter(
  migrations: readonly MigrationMeta[],
  lastCreatedAt: unknown,
  journal: SQL,
): Array<{ statement: SQL; adds?: AddedColumn }> {
  return pending(migrations, lastCreatedAt).flatMap((migration) => [
    ...migration.sql.map((statement) => ({ statement: sql.raw(statement), adds: addedColumn(statement) })),
    {
      statement: sql`INSERT INTO ${journal} ("hash", "created_at") VALUES (${migration.hash}, ${migration.folderMillis})`,
    },
  ]);
}

/** The table and column of an `ALTER TABLE … ADD …` statement. */
export interface AddedColumn {
  table: string;
  column: string;
}

/**
 * The column a migration statement adds, when it is drizzle-kit's `ALTER TABLE t ADD [COLUMN] c …`.
 * SQLite and MySQL 8 have no `ADD COLUMN IF NOT EXISTS`, so on them `migrate` skips such a
 * statement when the column is there already (tables that drizzle-kit created from a newer
 * schema, or that were migrated under another journal table): what `IF NOT EXISTS` does for
 * every other statement.
 */
export function addedColumn(statement: string): AddedColumn | undefined {
  const found =
    /^\s*ALTER TABLE\s+[`"]?([^`"\s]+)[`"]?\s+ADD\s+(?:COLUMN\s+)?(?:IF NOT EXISTS\s+)?[`"]?([^`"\s]+)[`"]?\s/i.exec(
      statement,
    );
  return found ? { table: found[1] as string, column: found[2] as string } : undefined;
}

function sqliteColumnExists({ table, column }: AddedColumn): SQL {
  return sql`SELECT 1 FROM pragma_table_info(${table}) WHERE name = ${column}`;
}

function mysqlColumnExists({ table, column }: AddedColumn): SQL {
  return sql`SELECT 1 FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ${table} AND column_name = ${column}`;
}

const DDL_ATTEMPTS = 5;

/**
 * Runs idempotent DDL (`CREATE … IF NOT EXISTS`, a column added when a read found it missing, a
 * migrator) again when a concurrent process created the same table, index, schema or column
 * first and the database failed this one; other errors pass through. Use it for your own
 * start-up DDL next to `migrate()`: the run starts again from the top, so a read of the catalog
 * inside it sees what the other process created.
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
/**
 * What a concurrent creation of the same object fails with:
 * - PostgreSQL SQLSTATEs unique_violation (a catalog row), duplicate_table, duplicate_object,
 *   duplicate_schema and duplicate_column;
 * - MySQL's table, index and column exist already;
 * - SQLite's "duplicate column name" (its code is the generic SQLITE_ERROR: the message tells).
 */
const CONCURRENT_DDL_CODES = new Set([
  '23505',
  '42P07',
  '42710',
  '42P06',
  '42701',
  'ER_TABLE_EXISTS_ERROR',
  'ER_DUP_KEYNAME',
  'ER_DUP_FIELDNAME',
]);
const SQLITE_DUPLICATE_COLUMN = /\bduplicate column name\b/i;

function isConcurrentDdlConflict(error: unknown): boolean {
  for (let cause: unknown = error; cause instanceof Error; cause = cause.cause) {
    const code = (cause as { code?: unknown }).code;
    if (typeof code === 'string' && CONCURRENT_DDL_CODES.has(code)) return true;
    if (typeof code === 'string' && code.startsWith('SQLITE_') && SQLITE_DUPLICATE_COLUMN.test(cause.message))
      return true;
  }
  return false;
}

async function currentSchema(db: AnyPgDatabase): Promise<string> {
  const [row] = await db.select({ schema: sql<string | null>`current_schema()` }).from(sql`(VALUES (1)) AS one (x)`);
  const schema = row?.schema;
  if (!schema)
    throw new Error(
      '[idem] migrate: the connection has no current schema (empty search_path); set one or pass migrationsSchema',
    );
  return schema;
}
