/**
 * The MySQL tables (MySQL 8.0+, MariaDB 10.6+), defined with drizzle's schema builders.
 * Timestamps are `datetime(3)` in UTC from the server's clock (`UTC_TIMESTAMP(3)`, whatever the
 * session's time zone; `timestamp` would end in 2038). `scope`, `key` and `token` are
 * `varbinary`: compared byte for byte, with no case folding, accent folding or trailing-space
 * padding, which every text collation of one server or the other applies. Bodies and
 * fingerprints are utf8mb4 text whatever the database's default character set, so replays are
 * byte-identical. MySQL has no partial index: the expiry and archive indexes lead with `state`.
 * The committed migrations in `migrations/mysql` create the default-named tables below.
 */
import { sql } from 'drizzle-orm';
import { customType, datetime, index, int, mysqlTable, primaryKey, varbinary, varchar } from 'drizzle-orm/mysql-core';
import { resolveTableNames, type TableOptions } from '../table-names.js';

export const RECORD_STATES = ['processing', 'completed', 'released', 'archived', 'resumable'] as const;
const ON_FAILURE = ['replay', 'resume'] as const;
const OUTCOME_KINDS = ['success', 'error'] as const;

/** The longest values the `varbinary` columns hold, in UTF-8 bytes. */
export const MYSQL_COLUMN_BYTES = { scope: 1024, key: 512, token: 255 } as const;

const instant = (name: string) => datetime(name, { mode: 'date', fsp: 3 });
/** utf8mb4 text, declared on the column so that a latin1 or utf8mb3 database default does not apply. */
const utf8Text = customType<{ data: string; driverData: string }>({
  dataType: () => 'text CHARACTER SET utf8mb4 COLLATE utf8mb4_bin',
});
const utf8LongText = customType<{ data: string; driverData: string }>({
  dataType: () => 'longtext CHARACTER SET utf8mb4 COLLATE utf8mb4_bin',
});

/**
 * Defines the live table and the history table, for your own drizzle schema (drizzle-kit then
 * creates them): other names, or `{ prefix: 'project_' }` for `project_idem_keys` and
 * `project_idem_key_history`; pass the same options to `createDrizzleStore(db, { tables })`.
 */
export function defineMysqlTables(options: TableOptions = {}) {
  const { keys, history } = resolveTableNames(options);
  const liveTable = mysqlTable(
    keys,
    {
      scope: varbinary('scope', { length: MYSQL_COLUMN_BYTES.scope }).notNull(),
      key: varbinary('key', { length: MYSQL_COLUMN_BYTES.key }).notNull(),
      generation: int('generation').notNull(),
      fingerprint: utf8Text('fingerprint'),
      state: varchar('state', { length: 16, enum: RECORD_STATES }).notNull(),
      token: varbinary('token', { length: MYSQL_COLUMN_BYTES.token }).notNull(),
      createdAt: instant('created_at').notNull(),
      leaseUntil: instant('lease_until').notNull(),
      expiresAt: instant('expires_at').notNull(),
      completedAt: instant('completed_at'),
      archivedAt: instant('archived_at'),
      takeovers: int('takeovers').notNull().default(0),
      outcomeKind: varchar('outcome_kind', { length: 16, enum: OUTCOME_KINDS }),
      outcomeStatus: int('outcome_status'),
      body: utf8LongText('body'),
      // E3w, A1: duplicates that waited for this generation's outcome. Last, where the migration
      // that added it put it: a table drizzle-kit creates from this schema and a migrated one then
      // have the same column order (PostgreSQL's first step reads `RETURNING` beside `SELECT *`).
      waits: int('waits').notNull().default(0),
      // E8: the generation's mode, its executions and its recovery points (a JSON array of
      // { name, result }, utf8mb4 text like the body; a text column's default is an expression,
      // MySQL 8.0.13+), appended after `waits` by the migration that added them.
      onFailure: varchar('on_failure', { length: 16, enum: ON_FAILURE }).notNull().default('replay'),
      attempts: int('attempts').notNull().default(1),
      steps: utf8LongText('steps').notNull().default(sql`('[]')`),
    },
    (table) => [
      primaryKey({ columns: [table.scope, table.key] }),
      // The sweeper's path (R3): `state IN (<not archived>) AND expires_at <= now` is one range
      // per state, so the archived tombstones kept until purge are never scanned.
      index(`${keys}_expires_at_idx`).on(table.state, table.expiresAt),
      // Purge's path: `state = 'archived' AND archived_at < horizon`.
      index(`${keys}_archived_at_idx`).on(table.state, table.archivedAt),
    ],
  );
  const historyTable = mysqlTable(
    history,
    {
      scope: varbinary('scope', { length: MYSQL_COLUMN_BYTES.scope }).notNull(),
      key: varbinary('key', { length: MYSQL_COLUMN_BYTES.key }).notNull(),
      generation: int('generation').notNull(),
      fingerprint: utf8Text('fingerprint'),
      state: varchar('state', { length: 16, enum: RECORD_STATES }).notNull(),
      token: varbinary('token', { length: MYSQL_COLUMN_BYTES.token }).notNull(),
      createdAt: instant('created_at').notNull(),
      leaseUntil: instant('lease_until').notNull(),
      expiresAt: instant('expires_at').notNull(),
      completedAt: instant('completed_at'),
      archivedAt: instant('archived_at').notNull(),
      takeovers: int('takeovers').notNull(),
      outcomeKind: varchar('outcome_kind', { length: 16, enum: OUTCOME_KINDS }),
      outcomeStatus: int('outcome_status'),
      body: utf8LongText('body'),
      reusedAt: instant('reused_at').notNull(),
      waits: int('waits').notNull().default(0),
      // E8: the generation's mode, its executions and its recovery points (a JSON array of
      // { name, result }, utf8mb4 text like the body; a text column's default is an expression,
      // MySQL 8.0.13+), appended after `waits` by the migration that added them.
      onFailure: varchar('on_failure', { length: 16, enum: ON_FAILURE }).notNull().default('replay'),
      attempts: int('attempts').notNull().default(1),
      steps: utf8LongText('steps').notNull().default(sql`('[]')`),
    },
    (table) => [
      primaryKey({ columns: [table.scope, table.key, table.generation] }),
      index(`${history}_archived_at_idx`).on(table.archivedAt),
    ],
  );
  return { keys: liveTable, history: historyTable };
}

export type MysqlTables = ReturnType<typeof defineMysqlTables>;

const defaults = defineMysqlTables();
/** The live table `idem_keys`: one row per (scope, key), the current generation. */
export const idemKeys = defaults.keys;
/** The history table `idem_key_history`: earlier generations, archived when their key was reused (R2). */
export const idemKeyHistory = defaults.history;
