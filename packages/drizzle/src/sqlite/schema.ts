/**
 * The SQLite tables, defined with drizzle's schema builders. Timestamps are integer epoch
 * milliseconds taken from SQLite's clock; bodies are text so key order and bytes survive.
 * The committed migrations in `migrations/sqlite` create the default-named tables below.
 */
import { sql } from 'drizzle-orm';
import { index, integer, primaryKey, sqliteTable, text } from 'drizzle-orm/sqlite-core';
import { resolveTableNames, type TableOptions } from '../table-names.js';

const RECORD_STATES = ['processing', 'completed', 'released', 'archived', 'resumable'] as const;
const ON_FAILURE = ['replay', 'resume'] as const;
const OUTCOME_KINDS = ['success', 'error'] as const;

/**
 * Defines the live table and the history table, for your own drizzle schema: export them from
 * it and drizzle-kit's `generate` / `migrate` create them with your tables (what `migrate()`
 * creates, under the names you choose). `{ prefix: 'project_' }` names them
 * `project_idem_keys` and `project_idem_key_history`; pass the same options to
 * `createDrizzleStore(db, { tables })`.
 *
 * ```ts
 * // src/server/db/schema.ts
 * export const { keys: idemKeys, history: idemKeyHistory } = defineSqliteTables({ prefix: 'project_' });
 * ```
 */
export function defineSqliteTables(options: TableOptions = {}) {
  const { keys, history } = resolveTableNames(options);
  const liveTable = sqliteTable(
    keys,
    {
      scope: text('scope').notNull(),
      key: text('key').notNull(),
      generation: integer('generation').notNull(),
      fingerprint: text('fingerprint'),
      state: text('state', { enum: RECORD_STATES }).notNull(),
      token: text('token').notNull(),
      createdAt: integer('created_at', { mode: 'timestamp_ms' }).notNull(),
      leaseUntil: integer('lease_until', { mode: 'timestamp_ms' }).notNull(),
      expiresAt: integer('expires_at', { mode: 'timestamp_ms' }).notNull(),
      completedAt: integer('completed_at', { mode: 'timestamp_ms' }),
      archivedAt: integer('archived_at', { mode: 'timestamp_ms' }),
      takeovers: integer('takeovers').notNull().default(0),
      outcomeKind: text('outcome_kind', { enum: OUTCOME_KINDS }),
      outcomeStatus: integer('outcome_status'),
      body: text('body'),
      // E3w, A1: duplicates that waited for this generation's outcome. Last, where the migration
      // that added it put it: a table drizzle-kit creates from this schema and a migrated one then
      // have the same column order (PostgreSQL's first step reads `RETURNING` beside `SELECT *`).
      waits: integer('waits').notNull().default(0),
      // E8: the generation's mode, its executions and its recovery points (a JSON array of
      // { name, result }), appended after `waits` by the migration that added them.
      onFailure: text('on_failure', { enum: ON_FAILURE }).notNull().default('replay'),
      attempts: integer('attempts').notNull().default(1),
      steps: text('steps').notNull().default('[]'),
    },
    (table) => [
      primaryKey({ columns: [table.scope, table.key] }),
      // The sweeper's path (R3). Literal predicate: SQLite only uses a partial index when the
      // query repeats the same literal, so the sweep query writes `state <> 'archived'` inline.
      index(`${keys}_expires_at_idx`).on(table.expiresAt).where(sql`"state" <> 'archived'`),
      index(`${keys}_archived_at_idx`).on(table.archivedAt).where(sql`"state" = 'archived'`),
      // Operators' path (idem stats, doctor): the oldest claim, claims past their lease.
      index(`${keys}_processing_idx`).on(table.createdAt).where(sql`"state" = 'processing'`),
      // idem stats' takeovers of the last day: only the rows ever taken over (E6) are in it.
      index(`${keys}_takeover_idx`).on(table.leaseUntil).where(sql`"takeovers" > 0`),
    ],
  );
  const historyTable = sqliteTable(
    history,
    {
      scope: text('scope').notNull(),
      key: text('key').notNull(),
      generation: integer('generation').notNull(),
      fingerprint: text('fingerprint'),
      state: text('state', { enum: RECORD_STATES }).notNull(),
      token: text('token').notNull(),
      createdAt: integer('created_at', { mode: 'timestamp_ms' }).notNull(),
      leaseUntil: integer('lease_until', { mode: 'timestamp_ms' }).notNull(),
      expiresAt: integer('expires_at', { mode: 'timestamp_ms' }).notNull(),
      completedAt: integer('completed_at', { mode: 'timestamp_ms' }),
      archivedAt: integer('archived_at', { mode: 'timestamp_ms' }).notNull(),
      takeovers: integer('takeovers').notNull(),
      outcomeKind: text('outcome_kind', { enum: OUTCOME_KINDS }),
      outcomeStatus: integer('outcome_status'),
      body: text('body'),
      reusedAt: integer('reused_at', { mode: 'timestamp_ms' }).notNull(),
      waits: integer('waits').notNull().default(0),
      // E8: the generation's mode, its executions and its recovery points (a JSON array of
      // { name, result }), appended after `waits` by the migration that added them.
      onFailure: text('on_failure', { enum: ON_FAILURE }).notNull().default('replay'),
      attempts: integer('attempts').notNull().default(1),
      steps: text('steps').notNull().default('[]'),
    },
    (table) => [
      primaryKey({ columns: [table.scope, table.key, table.generation] }),
      index(`${history}_archived_at_idx`).on(table.archivedAt),
    ],
  );
  return { keys: liveTable, history: historyTable };
}

export type SqliteTables = ReturnType<typeof defineSqliteTables>;

const defaults = defineSqliteTables();
/** The live table `idem_keys`: one row per (scope, key), the current generation. */
export const idemKeys = defaults.keys;
/** The history table `idem_key_history`: earlier generations, archived when their key was reused (R2). */
export const idemKeyHistory = defaults.history;
