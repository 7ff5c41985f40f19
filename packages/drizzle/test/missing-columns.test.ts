/**
 * E5/E8 upgrade: tables migrated by the previous release (up to 0003_waits on SQLite and
 * PostgreSQL, 0001_waits on MySQL) used by this one. Before `migrate` runs, the store refuses
 * loudly, naming the missing columns and the migration that adds them (a `StoreConfigurationError`,
 * which the engine logs once and puts in its 503's detail), instead of a bare driver error; after
 * `migrate`, the rows written by the previous release read as E8 says they upgrade: mode `replay`,
 * one attempt per execution started (1 + takeovers), no steps.
 */
import { randomUUID } from 'node:crypto';
import { sql, type SQL } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { StoreConfigurationError } from '@idem/core';
import { createDrizzleStore, migrate, type DrizzleDatabase } from '../src/index.ts';
import { migrationsFor } from '../src/migration-files.ts';
import { withoutParameters } from '../src/query-errors.ts';
import { DRIVERS } from './drivers.ts';
import { mysqlSuitesRun, openMysqlTarget } from './mysql-target.ts';

const E8_COLUMNS = ['on_failure', 'attempts', 'steps'];
const mysqlRuns = await mysqlSuitesRun();

interface Target {
  dialect: 'sqlite' | 'postgres' | 'mysql';
  driver: string;
  db: DrizzleDatabase;
  exec(statement: SQL): Promise<void>;
}

/** The previous release's tables: migrated, then E8's columns dropped and its journal entry removed. */
async function previousRelease(target: Target): Promise<void> {
  await migrate(target.db);
  for (const table of ['idem_keys', 'idem_key_history'])
    for (const column of E8_COLUMNS)
      await target.exec(sql`ALTER TABLE ${sql.identifier(table)} DROP COLUMN ${sql.identifier(column)}`);
  const last = migrationsFor(target.dialect).at(-1)!;
  await target.exec(sql`DELETE FROM ${sql.identifier('__idem_migrations')} WHERE created_at = ${last.folderMillis}`);
  // A row the previous release wrote: a claim taken over twice, then completed.
  const timestamp = target.dialect === 'sqlite' ? sql`${Date.now()}` : sql`CURRENT_TIMESTAMP`;
  await target.exec(
    sql`INSERT INTO idem_keys (scope, ${sql.identifier('key')}, generation, fingerprint, state, token, created_at, lease_until, expires_at, completed_at, takeovers, outcome_kind, outcome_status, body, waits)
        VALUES ('old', 'k', 1, NULL, 'completed', 't', ${timestamp}, ${timestamp}, ${timestamp}, ${timestamp}, 2, 'success', 200, '1', 0)`,
  );
}

function expectNamesTheColumns(error: unknown) {
  expect(error).toBeInstanceOf(StoreConfigurationError);
  const message = (error as Error).message;
  expect(message).toMatch(/^\[idem\] the store's tables idem_keys and idem_key_history lack the column /);
  for (const column of E8_COLUMNS) expect(message).toContain(column);
  expect(message).toMatch(/migration 000[42]_resume adds/);
  expect(message).toContain('npx idem migrate');
}

async function checkUpgrade(target: Target) {
  await previousRelease(target);
  const request = {
    scope: 'new',
    key: randomUUID(),
    fingerprint: null,
    token: randomUUID(),
    leaseMs: 30_000,
    retentionMs: 60_000,
    expiredReuse: 'execute',
    onFailure: 'resume',
  } as const;
  if (target.driver === 'better-sqlite3') {
    // better-sqlite3 prepares its statements when the store is created: it refuses at start-up.
    expectNamesTheColumns(
      await Promise.resolve()
        .then(() => createDrizzleStore(target.db))
        .catch((e: unknown) => e),
    );
  } else {
    const store = createDrizzleStore(target.db);
    expectNamesTheColumns(await store.claim(request).catch((e: unknown) => e));
    expectNamesTheColumns(await store.get('old', 'k').catch((e: unknown) => e));
  }
  await migrate(target.db);
  const store = createDrizzleStore(target.db);
  expect(await store.get('old', 'k')).toMatchObject({ onFailure: 'replay', attempts: 3, takeovers: 2, steps: [] });
  const claimed = await store.claim(request);
  expect(claimed).toMatchObject({ outcome: 'claimed', record: { onFailure: 'resume', attempts: 1, steps: [] } });
}

describe('E5/E8: tables of the previous release (no on_failure, attempts, steps) used by this one', () => {
  for (const spec of DRIVERS) {
    it.runIf(spec.runs)(
      `${spec.name}: refuses naming the missing columns and their migration; migrate() then upgrades the old rows (attempts = 1 + takeovers)`,
      async () => {
        const opened = await spec.open();
        try {
          await checkUpgrade({
            dialect: spec.dialect,
            driver: spec.name,
            db: opened.db,
            exec: async (statement) =>
              void (spec.dialect === 'sqlite'
                ? await (opened.db as import('drizzle-orm/sqlite-core').BaseSQLiteDatabase<'async', unknown>).run(
                    statement,
                  )
                : await (opened.db as import('drizzle-orm/pg-core').PgDatabase<any>).execute(statement)),
          });
        } finally {
          await opened.close();
        }
      },
    );
  }

  it.runIf(mysqlRuns)(
    'mysql2: refuses naming the missing columns and their migration; migrate() then upgrades the old rows (attempts = 1 + takeovers)',
    async () => {
      const opened = await openMysqlTarget();
      try {
        await checkUpgrade({
          dialect: 'mysql',
          driver: 'mysql2',
          db: opened.db,
          exec: async (statement) => void (await opened.db.execute(statement)),
        });
      } finally {
        await opened.close();
      }
    },
  );

  it("only the store's own columns: a handler's table missing a column (atomic mode) stays the driver's error", () => {
    const tables = { keys: 'idem_keys', history: 'idem_key_history' };
    const driverError = (message: string, fields: object) => Object.assign(new Error(message), fields);
    const theirs = [
      driverError('no such column: payments.steps', { code: 'SQLITE_ERROR' }),
      driverError('table payments has no column named attempts', { code: 'SQLITE_ERROR' }),
      driverError('column "steps" of relation "payments" does not exist', { code: '42703' }),
      driverError('column payments.attempts does not exist', { code: '42703' }),
      driverError("Unknown column 'payments.steps' in 'field list'", { code: 'ER_BAD_FIELD_ERROR', errno: 1054 }),
      // Unqualified, and no statement shows it ran on the store's tables.
      driverError('column "steps" does not exist', { code: '42703' }),
      // Not a column a migration of the store added.
      driverError('column idem_keys.colour does not exist', { code: '42703' }),
    ];
    for (const error of theirs) expect(withoutParameters(error, tables, 'postgres')).toBe(error);
    const ours: Array<[Error, 'sqlite' | 'postgres' | 'mysql']> = [
      [driverError('no such column: idem_keys.steps', { code: 'SQLITE_ERROR' }), 'sqlite'],
      [driverError('table idem_key_history has no column named on_failure', { code: 'SQLITE_ERROR' }), 'sqlite'],
      [driverError('column "attempts" of relation "idem_keys" does not exist', { code: '42703' }), 'postgres'],
      [driverError('column idem_keys.steps does not exist', { code: '42703' }), 'postgres'],
      [
        driverError("Unknown column 'idem_keys.on_failure' in 'field list'", {
          code: 'ER_BAD_FIELD_ERROR',
          errno: 1054,
        }),
        'mysql',
      ],
      [
        Object.assign(new Error('Failed query: insert into "idem_keys" …'), {
          query: 'insert into "idem_keys" ("scope", "on_failure") values ($1, $2)',
          cause: driverError('column "on_failure" does not exist', { code: '42703' }),
        }),
        'postgres',
      ],
      // mysql2's own error (drizzle-orm before 0.44 does not wrap it) names the statement as `sql`.
      [
        Object.assign(
          driverError("Unknown column 'steps' in 'field list'", { code: 'ER_BAD_FIELD_ERROR', errno: 1054 }),
          {
            sql: 'update `idem_keys` set `steps` = ? where …',
          },
        ),
        'mysql',
      ],
    ];
    for (const [error, dialect] of ours) expectNamesTheColumns(withoutParameters(error, tables, dialect));
  });
});
