/**
 * `retryConcurrentDdl` around an app's own start-up DDL, run by several processes at once: the
 * usual "read the catalog, add what is missing" finds a column missing in every process and
 * every one of them adds it; all but the first fail with the dialect's "already exists", which
 * the helper must recognise so that the run starts again and its read finds the column.
 * Generated: 2–6 concurrent migrators over 1–4 missing columns, on SQLite (one connection per
 * migrator to one file), PostgreSQL and MySQL (a pool with a connection per migrator).
 */
import { sql, type SQL } from 'drizzle-orm';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { retryConcurrentDdl } from '../src/index.ts';
import { openMysqlTarget, mysqlSuitesRun } from './mysql-target.ts';
import { openPostgresTarget } from './pg-target.ts';
import { openSqliteConnection, openSqliteTarget } from './sqlite-target.ts';

interface Dialect {
  /** One executor per migrator; `columns()` reads the table's columns. */
  run(statement: SQL, migrator: number): Promise<unknown>;
  columns(migrator: number): Promise<string[]>;
  close(): Promise<void>;
}

const COLUMNS = ['a', 'b', 'c', 'd'];

/** What an app writes: create the table, read its columns, add each one missing. */
async function appDdl(dialect: Dialect, migrator: number, wanted: readonly string[]): Promise<void> {
  await dialect.run(sql`CREATE TABLE IF NOT EXISTS app_table (id integer PRIMARY KEY)`, migrator);
  const present = await dialect.columns(migrator);
  for (const column of wanted)
    if (!present.includes(column))
      await dialect.run(sql`ALTER TABLE app_table ADD COLUMN ${sql.identifier(column)} text`, migrator);
}

const scenario = fc.record({
  migrators: fc.integer({ min: 2, max: 6 }),
  wanted: fc.subarray(COLUMNS, { minLength: 1 }),
});

async function check(open: (migrators: number) => Promise<Dialect>, runs: number) {
  await fc.assert(
    fc.asyncProperty(scenario, async ({ migrators, wanted }) => {
      const dialect = await open(migrators);
      try {
        const outcomes = await Promise.allSettled(
          Array.from({ length: migrators }, (_, migrator) =>
            retryConcurrentDdl(() => appDdl(dialect, migrator, wanted)),
          ),
        );
        expect(outcomes.filter((outcome) => outcome.status === 'rejected')).toEqual([]);
        expect((await dialect.columns(0)).filter((column) => column !== 'id').sort()).toEqual([...wanted].sort());
      } finally {
        await dialect.close();
      }
    }),
    { numRuns: runs },
  );
}

const mysqlRuns = await mysqlSuitesRun();

describe('retryConcurrentDdl: concurrent "add the missing column" start-ups all succeed', () => {
  it('SQLite (better-sqlite3, one connection per process)', async () => {
    await check(async (migrators) => {
      const target = await openSqliteTarget();
      const connections = [target, ...Array.from({ length: migrators - 1 }, () => openSqliteConnection(target.file))];
      return {
        run: async (statement, migrator) => connections[migrator]!.db.run(statement),
        columns: async (migrator) =>
          connections[migrator]!.db.all<{ name: string }>(sql`SELECT name FROM pragma_table_info('app_table')`).map(
            (row) => row.name,
          ),
        close: async () => {
          for (const connection of connections.slice(1)) connection.client.close();
          await target.close();
        },
      };
    }, 30);
  });

  it('PostgreSQL', async () => {
    await check(async (migrators) => {
      const target = await openPostgresTarget({ max: migrators, schemaPrefix: 'idem_ddl_race' });
      return {
        run: (statement) => target.db.execute(statement),
        columns: async () => {
          const result = (await target.db.execute(
            sql`SELECT column_name AS name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'app_table'`,
          )) as { rows: Array<{ name: string }> };
          return result.rows.map((row) => row.name);
        },
        close: () => target.close(),
      };
    }, 20);
  });

  it.runIf(mysqlRuns)('MySQL', async () => {
    await check(async (migrators) => {
      const target = await openMysqlTarget({ connectionLimit: migrators, prefix: 'idem_ddl_race' });
      return {
        run: (statement) => target.db.execute(statement),
        columns: async () => {
          const [rows] = (await target.db.execute(
            sql`SELECT column_name AS name FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = 'app_table'`,
          )) as unknown as [Array<{ name: string }>];
          return rows.map((row) => row.name);
        },
        close: () => target.close(),
      };
    }, 15);
  });
});
