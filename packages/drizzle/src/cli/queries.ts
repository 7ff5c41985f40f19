/**
 * The read queries the `idem` CLI needs beyond the store contract: which scopes hold a key,
 * the database's clock, and per-scope figures for `idem policy`. Aggregates run in SQL, so
 * `policy` reads one row per scope, not every record.
 */
import { sql, type SQL, type SQLWrapper } from 'drizzle-orm';
import type { OpenedDatabase } from '../connect.js';
import type { DatabaseClock } from '../database-clock.js';
import { clockOf as dialectClock, readRows, tablesOf as dialectTables, type Row } from '../dialect-rows.js';
import { expiredAt } from '../row-writes.js';
import type { TableNames } from '../table-names.js';

export type { Row };

/**
 * Runs a read statement and answers its rows as plain objects (column name → raw value; on
 * MySQL, `varbinary` columns such as scope and key come as Buffers, read with String()).
 */
export function rows(opened: OpenedDatabase, query: SQL): Promise<Row[]> {
  return readRows(opened, query);
}

/** The tables of the opened dialect under `names`. */
export function tablesOf(opened: OpenedDatabase, names: TableNames) {
  return dialectTables(opened.dialect, names);
}

export function clockOf(opened: OpenedDatabase): DatabaseClock {
  return dialectClock(opened.dialect);
}

/**
 * A timestamp column as epoch milliseconds: SQLite stores them so, PostgreSQL as `timestamptz`,
 * MySQL as a UTC `datetime(3)` (not `UNIX_TIMESTAMP()`, which reads it in the session's time zone).
 */
export function epochMs(opened: OpenedDatabase, column: SQLWrapper): SQL {
  if (opened.dialect === 'mysql') return sql`(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', ${column}) DIV 1000)`;
  return opened.dialect === 'sqlite' ? sql`${column}` : sql`(extract(epoch from ${column}) * 1000)::float8`;
}

export function toDate(value: unknown): Date | null {
  return value === null || value === undefined ? null : new Date(Math.round(Number(value)));
}

/** Resolves when the database answers a query. */
export async function pingDatabase(opened: OpenedDatabase): Promise<void> {
  await rows(opened, sql`SELECT 1 AS one`);
}

/**
 * Which of `names` are tables the connection sees, from the catalog (not from a failing query):
 * SQLite's `sqlite_master`; PostgreSQL's `to_regclass`, which follows the `search_path` as the
 * store's unqualified names do; MySQL's `information_schema` for the connection's database.
 */
export async function existingTables(opened: OpenedDatabase, names: readonly string[]): Promise<Set<string>> {
  if (names.length === 0) return new Set();
  const list = sql.join(
    names.map((name) => sql`${name}`),
    sql`, `,
  );
  let found: Row[];
  if (opened.dialect === 'sqlite')
    found = await rows(opened, sql`SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (${list})`);
  else if (opened.dialect === 'mysql')
    found = await rows(
      opened,
      sql`SELECT table_name AS name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name IN (${list})`,
    );
  else
    found = await rows(
      opened,
      sql`SELECT name FROM unnest(ARRAY[${list}]::text[]) AS candidate(name) WHERE to_regclass(quote_ident(name)) IS NOT NULL`,
    );
  return new Set(found.map((row) => String(row.name)));
}

/** The database's current time (R1: expiry is judged by the store's clock, not this machine's). */
export async function databaseNow(opened: OpenedDatabase): Promise<Date> {
  const now = clockOf(opened).now;
  const [row] = await rows(opened, sql`SELECT ${epochMs(opened, now)} AS now`);
  return toDate(row?.now) ?? new Date();
}

/**
 * Every scope that holds `key`, live or in history, sorted. This reads by key alone, which the
 * primary key (scope, key) does not serve: on a large table prefer `--scope`.
 */
export async function findScopes(opened: OpenedDatabase, names: TableNames, key: string): Promise<string[]> {
  const { keys, history } = tablesOf(opened, names);
  const found = await rows(
    opened,
    sql`SELECT ${keys.scope} AS scope FROM ${keys} WHERE ${keys.key} = ${key} UNION SELECT ${history.scope} AS scope FROM ${history} WHERE ${history.key} = ${key} ORDER BY 1`,
  );
  return found.map((row) => String(row.scope));
}

/** What `idem policy` shows for one scope, as the database records it. */
export interface ScopeFigures {
  scope: string;
  /** expiresAt − completedAt (firstSeen before completion, R1) of the scope's newest record: the retention the app applied last. */
  retentionMs: number | null;
  /** leaseUntil − firstSeen of the newest record never taken over (a takeover moves the lease). */
  leaseMs: number | null;
  /** Live records by state; `archived` are those the sweeper archived in place. */
  processing: number;
  completed: number;
  released: number;
  /** E8: failures kept for a retry to resume. */
  resumable: number;
  archived: number;
  /** Earlier generations of reused keys, kept in the history table (R2). */
  history: number;
  /** Live records past their retention that the sweeper has not archived yet (R3). */
  expiredNotSwept: number;
  /** First sight of the oldest record not archived. */
  oldestLive: Date | null;
  /** First sight of the oldest archived generation still kept: how far back audits reach (A1). */
  oldestArchived: Date | null;
}

/** Per-scope retention, lease, counts and ages, sorted by scope. */
export async function scopeFigures(opened: OpenedDatabase, names: TableNames): Promise<ScopeFigures[]> {
  const { keys, history } = tablesOf(opened, names);
  const ms = (column: SQLWrapper) => epochMs(opened, column);
  const count = (condition: SQL) => sql`sum(CASE WHEN ${condition} THEN 1 ELSE 0 END)`;
  const clock = clockOf(opened);

  const live = await rows(
    opened,
    sql`SELECT ${keys.scope} AS scope,
          ${count(sql`${keys.state} = 'processing'`)} AS processing,
          ${count(sql`${keys.state} = 'completed'`)} AS completed,
          ${count(sql`${keys.state} = 'released'`)} AS released,
          ${count(sql`${keys.state} = 'resumable'`)} AS resumable,
          ${count(sql`${keys.state} = 'archived'`)} AS archived,
          ${count(sql`${keys.state} <> 'archived' AND ${expiredAt(clock, keys)}`)} AS expired,
          min(CASE WHEN ${keys.state} <> 'archived' THEN ${ms(keys.createdAt)} END) AS oldest_live,
          min(CASE WHEN ${keys.state} = 'archived' THEN ${ms(keys.createdAt)} END) AS oldest_archived
        FROM ${keys} GROUP BY ${keys.scope}`,
  );
  const archived = await rows(
    opened,
    sql`SELECT ${history.scope} AS scope, count(*) AS history, min(${ms(history.createdAt)}) AS oldest FROM ${history} GROUP BY ${history.scope}`,
  );
  const newest = (select: SQL, where: SQL) =>
    rows(
      opened,
      sql`SELECT scope, span FROM (
            SELECT ${keys.scope} AS scope, ${select} AS span,
                   row_number() OVER (PARTITION BY ${keys.scope} ORDER BY ${keys.createdAt} DESC) AS newest
            FROM ${keys} WHERE ${where}) ranked
          WHERE newest = 1`,
    );
  const retention = await newest(
    sql`${ms(keys.expiresAt)} - ${ms(sql`coalesce(${keys.completedAt}, ${keys.createdAt})`)}`,
    sql`1 = 1`,
  );
  const lease = await newest(sql`${ms(keys.leaseUntil)} - ${ms(keys.createdAt)}`, sql`${keys.takeovers} = 0`);

  const byScope = new Map<string, ScopeFigures>();
  const figures = (scope: string): ScopeFigures => {
    let entry = byScope.get(scope);
    if (!entry) {
      entry = {
        scope,
        retentionMs: null,
        leaseMs: null,
        processing: 0,
        completed: 0,
        released: 0,
        resumable: 0,
        archived: 0,
        history: 0,
        expiredNotSwept: 0,
        oldestLive: null,
        oldestArchived: null,
      };
      byScope.set(scope, entry);
    }
    return entry;
  };
  const span = (value: unknown) => (value === null || value === undefined ? null : Math.round(Number(value)));
  for (const row of live) {
    const entry = figures(String(row.scope));
    entry.processing = Number(row.processing ?? 0);
    entry.completed = Number(row.completed ?? 0);
    entry.released = Number(row.released ?? 0);
    entry.resumable = Number(row.resumable ?? 0);
    entry.archived = Number(row.archived ?? 0);
    entry.expiredNotSwept = Number(row.expired ?? 0);
    entry.oldestLive = toDate(row.oldest_live);
    entry.oldestArchived = toDate(row.oldest_archived);
  }
  for (const row of archived) {
    const entry = figures(String(row.scope));
    entry.history = Number(row.history ?? 0);
    const oldest = toDate(row.oldest);
    if (oldest && (!entry.oldestArchived || oldest < entry.oldestArchived)) entry.oldestArchived = oldest;
  }
  for (const row of retention) figures(String(row.scope)).retentionMs = span(row.span);
  for (const row of lease) figures(String(row.scope)).leaseMs = span(row.span);
  return [...byScope.values()].sort((a, b) => (a.scope < b.scope ? -1 : a.scope > b.scope ? 1 : 0));
}
