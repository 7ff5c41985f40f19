/**
 * The PostgreSQL tables, defined with drizzle's schema builders. Timestamps are
 * `timestamptz(3)` from the server's clock; bodies are `text`, never `jsonb` (which would
 * reorder object keys). Tables are not schema-qualified: they live in the connection's
 * `search_path`. The committed migrations in `migrations/postgres` create the default-named
 * tables below.
 */
import { sql } from 'drizzle-orm';
import { index, integer, pgTable, primaryKey, text, timestamp } from 'drizzle-orm/pg-core';
import { resolveTableNames, type TableOptions } from '../table-names.js';

const RECORD_STATES = ['processing', 'completed', 'released', 'archived', 'resumable'] as const;
const ON_FAILURE = ['replay', 'resume'] as const;
const OUTCOME_KINDS = ['success', 'error'] as const;

const instant = (name: string) => timestamp(name, { withTimezone: true, precision: 3, mode: 'date' });

/**
 * Defines the live table and the history table, for your own drizzle schema: export them from
 * it and drizzle-kit's `generate` / `migrate` create them with your tables (what `migrate()`
 * creates, under the names you choose). `{ prefix: 'project_' }` names them
 * `project_idem_keys` and `project_idem_key_history`; pass the same options to
 * `createDrizzleStore(db, { tables })`.
 *
 * ```ts
 * // src/server/db/schema.ts
 * export const { keys: idemKeys, history: idemKeyHistory } = definePgTables({ prefix: 'project_' });
 * ```
 */
export function definePgTables(options: TableOptions = {}) {
  const { keys, history } = resolveTableNames(options);
  const liveTable = pgTable(
    keys,
    {
      scope: text('scope').notNull(),
      key: text('key').notNull(),
      generation: integer('generation').notNull(),
      fingerprint: text('fingerprint'),
      state: text('state', { enum: RECORD_STATES }).notNull(),
      token: text('token').notNull(),
      createdAt: instant('created_at').notNull(),
      leaseUntil: instant('lease_until').notNull(),
      expiresAt: instant('expires_at').notNull(),
      completedAt: instant('completed_at'),
      archivedAt: instant('archived_at'),
      takeovers: integer('takeovers').notNull().default(0),
      outcomeKind: text('outcome_kind', { enum: OUTCOME_KINDS }),
      outcomeStatus: integer('outcome_status'),
      body: text('body'),
      // E3w, A1: duplicates that waited for this generation's outcome. Last, where the migration
      // that added it put it: a table drizzle-kit creates from this schema and a migrated one then
      // have the same column order (PostgreSQL's first step reads `RETURNING` beside `SELECT *`).
      waits: integer('waits').notNull().default(0),
      // E8: the generation's mode, its executions and its recovery points (a JSON array of
      // { name, result }, as text like the body), appended after `waits` by the migration that added them.
      onFailure: text('on_failure', { enum: ON_FAILURE }).notNull().default('replay'),
      attempts: integer('attempts').notNull().default(1),
      steps: text('steps').notNull().default('[]'),
    },
    (table) => [
      primaryKey({ columns: [table.scope, table.key] }),
      // The sweeper's path (R3). The sweep query repeats this literal predicate so the
      // planner can prove the partial index applies.
      index(`${keys}_expires_at_idx`).on(table.expiresAt).where(sql`"state" <> 'archived'`),
      index(`${keys}_archived_at_idx`).on(table.archivedAt).where(sql`"state" = 'archived'`),
      // Operators' path (idem stats, doctor): the oldest claim, claims past their lease.
      index(`${keys}_processing_idx`).on(table.createdAt).where(sql`"state" = 'processing'`),
      // idem stats' takeovers of the last day: only the rows ever taken over (E6) are in it.
      index(`${keys}_takeover_idx`).on(table.leaseUntil).where(sql`"takeovers" > 0`),
    ],
  );
  const historyTable = pgTable(
    history,
    {
      scope: text('scope').notNull(),
      key: text('key').notNull(),
      generation: integer('generation').notNull(),
      fingerprint: text('fingerprint'),
      state: text('state', { enum: RECORD_STATES }).notNull(),
      token: text('token').notNull(),
      createdAt: instant('created_at').notNull(),
      leaseUntil: instant('lease_until').notNull(),
      expiresAt: instant('expires_at').notNull(),
      completedAt: instant('completed_at'),
      archivedAt: instant('archived_at').notNull(),
      takeovers: integer('takeovers').notNull(),
      outcomeKind: text('outcome_kind', { enum: OUTCOME_KINDS }),
      outcomeStatus: integer('outcome_status'),
      body: text('body'),
      reusedAt: instant('reused_at').notNull(),
      waits: integer('waits').notNull().default(0),
      // E8: the generation's mode, its executions and its recovery points (a JSON array of
      // { name, result }, as text like the body), appended after `waits` by the migration that added them.
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

export type PgTables = ReturnType<typeof definePgTables>;

const defaults = definePgTables();
/** The live table `idem_keys`: one row per (scope, key), the current generation. */
export const idemKeys = defaults.keys;
/** The history table `idem_key_history`: earlier generations, archived when their key was reused (R2). */
export const idemKeyHistory = defaults.history;
