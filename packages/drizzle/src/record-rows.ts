/**
 * The rows of the store's tables, typed by the tables themselves (`$inferSelect`): the three
 * dialects' tables infer one and the same row (checked below, at compile time), with
 * timestamps as `Date`. And their projection onto the store contract's types.
 */
import { toTimelineEntry, type IdempotencyRecord, type TimelineEntry } from '@idem/core/store';
import type { Column, SQL } from 'drizzle-orm';
import type { MysqlTables } from './mysql/schema.js';
import type { PgTables } from './pg/schema.js';
import type { SqliteTables } from './sqlite/schema.js';
import { parseSteps } from './steps.js';

/** A row of the live table. */
export type LiveRow = PgTables['keys']['$inferSelect'];
/** A row of the history table: an earlier generation, archived when its key was reused. */
export type HistoryRow = PgTables['history']['$inferSelect'];

/** The same type, whichever way round it is compared. */
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
/** Compile-time: the SQLite and MySQL tables infer the rows the PostgreSQL tables do. */
const rowsAgree: [
  Same<LiveRow, SqliteTables['keys']['$inferSelect']>,
  Same<LiveRow, MysqlTables['keys']['$inferSelect']>,
  Same<HistoryRow, SqliteTables['history']['$inferSelect']>,
  Same<HistoryRow, MysqlTables['history']['$inferSelect']>,
] = [true, true, true, true];
void rowsAgree;

/** A live row together with the database clock it was read at (R1: every rule reads the store's clock). */
export interface LiveRead {
  row: LiveRow;
  now: Date;
}

export function toRecord(row: LiveRow): IdempotencyRecord {
  return {
    scope: row.scope,
    key: row.key,
    generation: row.generation,
    fingerprint: row.fingerprint,
    state: row.state,
    token: row.token,
    createdAt: row.createdAt,
    leaseUntil: row.leaseUntil,
    expiresAt: row.expiresAt,
    completedAt: row.completedAt,
    archivedAt: row.archivedAt,
    takeovers: row.takeovers,
    waits: row.waits,
    onFailure: row.onFailure,
    attempts: row.attempts,
    steps: parseSteps(row.steps),
    outcome:
      row.outcomeKind === null || row.outcomeStatus === null
        ? null
        : { kind: row.outcomeKind, status: row.outcomeStatus, body: row.body },
  };
}

/** Every generation, oldest first: the history rows, then the live row (A1). */
export function toTimeline(history: HistoryRow[], live: LiveRow | undefined): TimelineEntry[] {
  const entries = history.map((row) => toTimelineEntry(toRecord(row), row.reusedAt));
  if (live) entries.push(toTimelineEntry(toRecord(live), null));
  return entries;
}

/** A table's columns as SQL reading each from elsewhere (a CTE, a subquery), typed as the columns read. */
export type ColumnsRead<TColumns extends Record<string, Column>> = {
  [K in keyof TColumns]: SQL<
    TColumns[K]['_']['notNull'] extends true ? TColumns[K]['_']['data'] : TColumns[K]['_']['data'] | null
  >;
};

/**
 * `columns` read through `from` (e.g. `r."scope"` of a subquery `r`), each mapped from the driver
 * as the column itself maps it: a selection that yields rows of the table's own type.
 */
export function columnsReadFrom<TColumns extends Record<string, Column>>(
  columns: TColumns,
  from: (column: Column) => SQL,
): ColumnsRead<TColumns> {
  const entries = Object.entries(columns).map(([field, column]) => [field, from(column).mapWith(column)]);
  return Object.fromEntries(entries) as ColumnsRead<TColumns>;
}
