/**
 * `idem stats` and `idem doctor`: what the store holds, and what needs an operator. The queries
 * read through the store's indexes where one serves (the expiry and archive indexes, the
 * primary key); docs/drizzle.md says which read what, with PostgreSQL's EXPLAIN.
 */
import { sql, type SQL } from 'drizzle-orm';
import type { OpenedDatabase } from '../connect.js';
import { clockOf, epochMs, existingTables, rows, tablesOf, toDate } from './queries.js';
import { migrationsFor } from '../migration-files.js';
import { expiredAt } from '../row-writes.js';
import { DEFAULT_TABLE_NAMES, type TableNames } from '../table-names.js';

const DAY_MS = 86_400_000;

export interface StateCounts {
  processing: number;
  completed: number;
  released: number;
  /** E8: failures kept for a retry to resume. */
  resumable: number;
  archived: number;
}

/**
 * How `stats` gets the counts by state and operation: `exact` counts every live row (a scan of
 * the table); `estimate` reads PostgreSQL's planner statistics (`ANALYZE`: the row estimate, the
 * `state` column's and the statistics object `<keys>_operation_state`'s most common values), no
 * scan at all; `auto` counts exactly below {@link EXACT_BELOW_ROWS} estimated rows and estimates
 * above (SQLite and MySQL always count).
 */
export type CountsMode = 'auto' | 'exact' | 'estimate';

/** Below this many rows (PostgreSQL's estimate) `auto` counts exactly: a scan of well under a second. */
export const EXACT_BELOW_ROWS = 1_000_000;

/** Where the counts by state and operation come from. */
export type CountsSource =
  | { kind: 'count' }
  | {
      kind: 'statistics';
      /** When the table was last analyzed (`ANALYZE` or autovacuum), from `pg_stat_user_tables`. */
      analyzedAt: Date | null;
      /** The planner's row estimate the frequencies were multiplied by. */
      rows: number;
      /**
       * Null when the per-operation statistics object is missing (tables created by your own
       * drizzle-kit migrations): the SQL that creates it, for a migration of yours.
       */
      missingStatistics: string | null;
    };

export interface Stats {
  /** How the two figures below were obtained. */
  counts: CountsSource;
  /** Live records by state. */
  states: StateCounts;
  /**
   * Live records by state per operation (the scope after its `<principal>/`), sorted by
   * operation. Estimated: the operations among the statistics' most common values, then one row
   * `(other operations)` with the rest of each state.
   */
  operations: Array<{ operation: string } & StateCounts>;
  /** The processing claim seen first, and whether its lease has passed (its owner likely died, E6). */
  oldestProcessing: { scope: string; firstSeenAt: Date; leaseUntil: Date; pastLease: boolean } | null;
  /** Records taken over (E6) whose current lease began in the last day: the takeovers of the last day. */
  takeoversLastDay: number;
  /** Live records past their retention that no sweep has archived yet (R3). */
  expiredNotSwept: number;
  /** When the oldest of those expired: how late sweeping runs. */
  oldestExpiredAt: Date | null;
  /** Live records archived in place by the sweeper (R3). */
  archived: number;
  /**
   * Earlier generations of reused keys (R2): counted, or on PostgreSQL the planner's row estimate
   * of the history table when the counts are estimated and it holds 1,000,000 rows or more.
   */
  history: number;
}

const count = (condition: SQL) => sql`sum(CASE WHEN ${condition} THEN 1 ELSE 0 END)`;

/** The operation of a scope `<principal>/<operation>` (core's `formatScope`); a scope without `/` is its own operation. */
function operationOf(opened: OpenedDatabase, scope: SQL | unknown): SQL {
  if (opened.dialect === 'mysql') return sql`SUBSTRING(${scope}, LOCATE('/', ${scope}) + 1)`;
  if (opened.dialect === 'sqlite') return sql`substr(${scope}, instr(${scope}, '/') + 1)`;
  return sql`substr(${scope}, strpos(${scope}, '/') + 1)`;
}

/** The statements of `idem stats`, by name (docs/drizzle.md shows each one's plan on PostgreSQL). */
export function statsQueries(opened: OpenedDatabase, names: TableNames) {
  const { keys, history } = tablesOf(opened, names);
  const clock = clockOf(opened);
  const ms = (column: Parameters<typeof epochMs>[1]) => epochMs(opened, column);
  return {
    byOperation: sql`SELECT ${operationOf(opened, keys.scope)} AS operation,
        ${count(sql`${keys.state} = 'processing'`)} AS processing,
        ${count(sql`${keys.state} = 'completed'`)} AS completed,
        ${count(sql`${keys.state} = 'released'`)} AS released,
        ${count(sql`${keys.state} = 'resumable'`)} AS resumable,
        ${count(sql`${keys.state} = 'archived'`)} AS archived
      FROM ${keys} GROUP BY 1 ORDER BY 1`,
    oldestProcessing: sql`SELECT ${keys.scope} AS scope, ${ms(keys.createdAt)} AS first_seen, ${ms(keys.leaseUntil)} AS lease_until,
        CASE WHEN ${keys.leaseUntil} <= ${clock.now} THEN 1 ELSE 0 END AS past_lease
      FROM ${keys} WHERE ${keys.state} = 'processing' ORDER BY ${keys.createdAt} LIMIT 1`,
    takeovers: sql`SELECT count(*) AS n FROM ${keys}
      WHERE ${keys.state} <> 'archived' AND ${keys.takeovers} > 0 AND ${keys.leaseUntil} > ${clock.before(sql`${DAY_MS}`)}`,
    expired: sql`SELECT count(*) AS n, min(${ms(keys.expiresAt)}) AS oldest FROM ${keys}
      WHERE ${keys.state} <> 'archived' AND ${expiredAt(clock, keys)}`,
    archived: sql`SELECT count(*) AS n FROM ${keys} WHERE ${keys.state} = 'archived' AND ${keys.archivedAt} IS NOT NULL`,
    history: sql`SELECT count(*) AS n FROM ${history}`,
  };
}

const n = (value: unknown) => Number(value ?? 0);
export const STATES = ['processing', 'completed', 'released', 'resumable', 'archived'] as const;
const noCounts = (): StateCounts => ({ processing: 0, completed: 0, released: 0, resumable: 0, archived: 0 });

/** The name of the statistics object migration 0002 creates on PostgreSQL 14+, for `keys`. */
export const operationStatisticsName = (keys: string) => `${keys}_operation_state`;

/** The statement that creates the statistics object behind the per-operation estimates. */
export function operationStatisticsSql(keys: string): string {
  const table = `"${keys.replaceAll('"', '""')}"`;
  return `CREATE STATISTICS IF NOT EXISTS "${operationStatisticsName(keys).replaceAll('"', '""')}" (mcv) ON "state", (substr("scope", strpos("scope", '/') + 1)) FROM ${table}; ANALYZE ${table};`;
}

/** Thrown for `estimate` where no estimate can be read: `usage` when the dialect has none at all. */
export class EstimateUnavailableError extends Error {
  constructor(
    message: string,
    readonly usage: boolean,
  ) {
    super(message);
  }
}

async function exactCounts(opened: OpenedDatabase, names: TableNames) {
  const operations = (await rows(opened, statsQueries(opened, names).byOperation)).map((row) => ({
    operation: String(row.operation),
    processing: n(row.processing),
    completed: n(row.completed),
    released: n(row.released),
    resumable: n(row.resumable),
    archived: n(row.archived),
  }));
  const states = noCounts();
  for (const each of operations) for (const state of STATES) states[state] += each[state];
  return { counts: { kind: 'count' } as const, states, operations };
}

/**
 * PostgreSQL's planner statistics of the live table, read from the catalog only (no row of the
 * table is read): undefined when it has never been analyzed.
 */
async function estimatedCounts(opened: OpenedDatabase, names: TableNames) {
  const table = sql`to_regclass(quote_ident(${names.keys}))`;
  const [about] = await rows(
    opened,
    sql`SELECT c.reltuples::float8 AS estimate, n.nspname AS schema,
          extract(epoch FROM greatest(s.last_analyze, s.last_autoanalyze)) * 1000 AS analyzed
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_stat_all_tables s ON s.relid = c.oid
        WHERE c.oid = ${table}`,
  );
  if (!about || n(about.estimate) < 0) return undefined;
  const estimate = n(about.estimate);
  const schema = String(about.schema);
  const byState = await rows(
    opened,
    sql`SELECT v.value AS state, v.freq FROM pg_stats s,
          unnest(s.most_common_vals::text::text[], s.most_common_freqs) AS v (value, freq)
        WHERE s.schemaname = ${schema} AND s.tablename = ${names.keys} AND s.attname = 'state'`,
  );
  if (byState.length === 0 && estimate > 0) return undefined;
  const states = noCounts();
  for (const row of byState) {
    const state = String(row.state) as keyof StateCounts;
    if (state in states) states[state] = Math.round(n(row.freq) * estimate);
  }
  const byOperation = await rows(
    opened,
    sql`SELECT x.most_common_vals[i][1] AS state, x.most_common_vals[i][2] AS operation, x.most_common_freqs[i] AS freq
        FROM pg_stats_ext x, generate_subscripts(x.most_common_vals, 1) AS i
        WHERE x.statistics_schemaname = ${schema} AND x.statistics_name = ${operationStatisticsName(names.keys)}`,
  );
  const [defined] = await rows(
    opened,
    sql`SELECT count(*) AS n FROM pg_statistic_ext WHERE stxrelid = ${table} AND stxname = ${operationStatisticsName(names.keys)}`,
  );
  const found = new Map<string, { operation: string } & StateCounts>();
  for (const row of byOperation) {
    const operation = String(row.operation);
    const state = String(row.state) as keyof StateCounts;
    if (!(state in states)) continue;
    const each = found.get(operation) ?? { operation, ...noCounts() };
    each[state] += Math.round(n(row.freq) * estimate);
    found.set(operation, each);
  }
  const operations = [...found.values()].sort((a, b) => (a.operation < b.operation ? -1 : 1));
  // The most common values cover every combination unless the table has more of them than the
  // statistics target keeps (100 by default): then the rest is one row.
  const covered = byOperation.reduce((sum, row) => sum + n(row.freq), 0);
  if (operations.length > 0 && covered < 0.99) {
    const other = { operation: '(other operations)', ...noCounts() };
    for (const state of STATES)
      other[state] = Math.max(0, states[state] - operations.reduce((sum, each) => sum + each[state], 0));
    if (STATES.some((state) => other[state] > 0)) operations.push(other);
  }
  const counts: CountsSource = {
    kind: 'statistics',
    analyzedAt: toDate(about.analyzed),
    rows: Math.round(estimate),
    missingStatistics: n(defined?.n) > 0 ? null : operationStatisticsSql(names.keys),
  };
  return { counts, states, operations };
}

/** The counts by state and operation under `mode` (see {@link CountsMode}). */
async function countRecords(opened: OpenedDatabase, names: TableNames, mode: CountsMode) {
  if (mode === 'exact') return exactCounts(opened, names);
  if (opened.dialect !== 'postgres') {
    if (mode === 'estimate')
      throw new EstimateUnavailableError(
        `--estimate reads PostgreSQL's planner statistics; on ${opened.dialect === 'mysql' ? 'MySQL' : 'SQLite'} stats counts every record`,
        true,
      );
    return exactCounts(opened, names);
  }
  const estimated = await estimatedCounts(opened, names);
  if (mode === 'estimate') {
    if (!estimated)
      throw new EstimateUnavailableError(
        `${names.keys} has no planner statistics yet: run ANALYZE ${names.keys} (autovacuum does, after enough writes), or idem stats --exact`,
        false,
      );
    return estimated;
  }
  return estimated && estimated.counts.kind === 'statistics' && estimated.counts.rows >= EXACT_BELOW_ROWS
    ? estimated
    : exactCounts(opened, names);
}

/** The history table's count, or its row estimate where the live counts are estimated and it is large. */
function historyCount(opened: OpenedDatabase, names: TableNames, counts: CountsSource, count: SQL): SQL {
  if (counts.kind !== 'statistics') return count;
  return sql`SELECT CASE WHEN c.reltuples >= ${EXACT_BELOW_ROWS} THEN c.reltuples::bigint ELSE (${count}) END AS n
    FROM pg_class c WHERE c.oid = to_regclass(quote_ident(${names.history}))`;
}

export async function readStats(opened: OpenedDatabase, names: TableNames, mode: CountsMode = 'auto'): Promise<Stats> {
  const q = statsQueries(opened, names);
  const { counts, states, operations } = await countRecords(opened, names, mode);
  const [oldest] = await rows(opened, q.oldestProcessing);
  const [takeovers] = await rows(opened, q.takeovers);
  const [expired] = await rows(opened, q.expired);
  const [archived] = await rows(opened, q.archived);
  const [history] = await rows(opened, historyCount(opened, names, counts, q.history));
  return {
    counts,
    states,
    operations,
    oldestProcessing: oldest
      ? {
          scope: String(oldest.scope),
          firstSeenAt: toDate(oldest.first_seen)!,
          leaseUntil: toDate(oldest.lease_until)!,
          pastLease: n(oldest.past_lease) === 1,
        }
      : null,
    takeoversLastDay: n(takeovers?.n),
    expiredNotSwept: n(expired?.n),
    oldestExpiredAt: toDate(expired?.oldest),
    archived: n(archived?.n),
    history: n(history?.n),
  };
}

/** Records past their retention not swept yet, and when the oldest expired: through the expiry index. */
export async function expiredBacklog(
  opened: OpenedDatabase,
  names: TableNames,
): Promise<Pick<Stats, 'expiredNotSwept' | 'oldestExpiredAt'>> {
  const [row] = await rows(opened, statsQueries(opened, names).expired);
  return { expiredNotSwept: n(row?.n), oldestExpiredAt: toDate(row?.oldest) };
}

/** Processing claims whose lease has passed, and the oldest of them. */
export async function claimsPastLease(
  opened: OpenedDatabase,
  names: TableNames,
): Promise<{ count: number; oldestScope: string | null; oldestLeaseUntil: Date | null }> {
  const { keys } = tablesOf(opened, names);
  const clock = clockOf(opened);
  const [row] = await rows(
    opened,
    sql`SELECT count(*) AS n, min(${epochMs(opened, keys.leaseUntil)}) AS oldest FROM ${keys}
        WHERE ${keys.state} = 'processing' AND ${keys.leaseUntil} <= ${clock.now}`,
  );
  const total = n(row?.n);
  if (total === 0) return { count: 0, oldestScope: null, oldestLeaseUntil: null };
  const [first] = await rows(
    opened,
    sql`SELECT ${keys.scope} AS scope FROM ${keys} WHERE ${keys.state} = 'processing' AND ${keys.leaseUntil} <= ${clock.now} ORDER BY ${keys.leaseUntil} LIMIT 1`,
  );
  return { count: total, oldestScope: first ? String(first.scope) : null, oldestLeaseUntil: toDate(row?.oldest) };
}

/** Whether the live table has its expiry index (`<keys>_expires_at_idx`), from the catalog. */
export async function hasExpiryIndex(opened: OpenedDatabase, names: TableNames): Promise<boolean> {
  const index = `${names.keys}_expires_at_idx`;
  let found;
  if (opened.dialect === 'sqlite')
    found = await rows(opened, sql`SELECT name FROM sqlite_master WHERE type = 'index' AND name = ${index}`);
  else if (opened.dialect === 'mysql')
    found = await rows(
      opened,
      sql`SELECT index_name FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name = ${names.keys} AND index_name = ${index}`,
    );
  else found = await rows(opened, sql`SELECT 1 AS one WHERE to_regclass(quote_ident(${index})) IS NOT NULL`);
  return found.length > 0;
}

/**
 * Whether every migration this version ships is recorded in `__idem_migrations`: `undefined`
 * for tables under other names, which the app's drizzle-kit migrations own.
 */
export async function migrationsBehind(opened: OpenedDatabase, names: TableNames): Promise<number | undefined> {
  if (names.keys !== DEFAULT_TABLE_NAMES.keys || names.history !== DEFAULT_TABLE_NAMES.history) return undefined;
  const shipped = migrationsFor(opened.dialect);
  const journal = '__idem_migrations';
  if (!(await existingTables(opened, [journal])).has(journal)) return shipped.length;
  const [row] = await rows(opened, sql`SELECT max(created_at) AS last FROM ${sql.identifier(journal)}`);
  const last = row?.last === null || row?.last === undefined ? -1 : Number(row.last);
  return shipped.filter((migration) => migration.folderMillis > last).length;
}
