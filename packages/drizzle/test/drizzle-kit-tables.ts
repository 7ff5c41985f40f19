/**
 * idem's tables under the app's own names, created as an app's drizzle-kit migrations create them:
 * drizzle-kit's programmatic API (`drizzle-kit/api`) diffs an empty schema against
 * `definePgTables(options)` / `defineSqliteTables` / `defineMysqlTables`, and the statements it
 * writes run on the database. (test/drizzle-kit.test.ts checks that this is what `migrate()` makes.)
 */
import { sql } from 'drizzle-orm';
import {
  generateDrizzleJson,
  generateMigration,
  generateMySQLDrizzleJson,
  generateMySQLMigration,
  generateSQLiteDrizzleJson,
  generateSQLiteMigration,
} from 'drizzle-kit/api';
import {
  defineMysqlTables,
  definePgTables,
  defineSqliteTables,
  type DrizzleDatabase,
  type TableOptions,
} from '../src/index.ts';
import type { Dialect } from '../src/dialect.ts';

/** The statements drizzle-kit generate writes for idem's tables under `options`, in `dialect`. */
export async function drizzleKitStatements(dialect: Dialect, options: TableOptions): Promise<string[]> {
  if (dialect === 'postgres')
    return generateMigration(generateDrizzleJson({}), generateDrizzleJson({ ...definePgTables(options) }));
  if (dialect === 'mysql')
    return generateMySQLMigration(
      await generateMySQLDrizzleJson({}),
      await generateMySQLDrizzleJson({ ...defineMysqlTables(options) }),
    );
  return generateSQLiteMigration(
    await generateSQLiteDrizzleJson({}),
    await generateSQLiteDrizzleJson({ ...defineSqliteTables(options) }),
  );
}

/** Creates idem's tables under `options` in the database behind `db`, as drizzle-kit migrate would. */
export async function createTablesWithDrizzleKit(
  db: DrizzleDatabase,
  dialect: Dialect,
  options: TableOptions,
): Promise<void> {
  for (const statement of await drizzleKitStatements(dialect, options)) {
    const query = sql.raw(statement);
    if (dialect === 'sqlite') await (db as { run(query: unknown): unknown }).run(query);
    else await (db as { execute(query: unknown): Promise<unknown> }).execute(query);
  }
}
