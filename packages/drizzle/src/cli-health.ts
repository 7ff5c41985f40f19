/**
 * `idem stats` and `idem doctor`: what the store holds, and what needs an operator. The queries
 * read through the store's indexes where one serves (the expiry and archive indexes, the
 * primary key); the drizzle README says which read what, with PostgreSQL's EXPLAIN.
 */
import { sql, type SQL } from 'drizzle-orm';
import type { OpenedDatabase } from './connect.js';
import { clockOf, epochMs, existingTables, rows, tablesOf, toDate } from './cli-queries.js';
import { migrationsFor } from './migration-files.js';
import { expiredAt } from './row-writes.js';
import { DEFAULT_TABLE_NAMES, type TableNames } from './table-names.js';

const DAY_MS = 86_400_000;

export interface StateCounts {
  processing: number;
  completed: number;
  released: number;
  archived: number;
}

export interface Stats {
  /** Live records by state. */
  states: StateCounts;
  /** Live records by state per operation (the scope after its `<principal>/`), sorted by operation. */
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
  /** Earlier generations of reused keys (R2). */
  history: number;
}

const count = (condition: SQL) => sql`sum(CASE WHEN ${condition} THEN 1 ELSE 0 END)`;

/** The operation of a scope `<principal>/<operation>` (core's `formatScope`); a scope without `/` is its own operation. */
function operationOf(opened: OpenedDatabase, scope: SQL | unknown): SQL {
  if (opened.dialect === 'mysql') return sql`SUBSTRING(${scope}, LOCATE('/', ${scope}) + 1)`;
  if (opened.dialect === 'sqlite') return sql`substr(${scope}, instr(${scope}, '/') + 1)`;
  return sql`substr(${scope}, strpos(${scope}, '/') + 1)`;
}

/** The statements of `idem stats`, by name (the README shows each one's plan on PostgreSQL). */
export function statsQueries(opened: OpenedDatabase, names: TableNames) {
  const { keys, history } = tablesOf(opened, names);
  const clock = clockOf(opened);
  const ms = (column: Parameters<typeof epochMs>[1]) => epochMs(opened, column);
  return {
    byOperation: sql`SELECT ${operationOf(opened, keys.scope)} AS operation,
        ${count(sql`${keys.state} = 'processing'`)} AS processing,
        ${count(sql`${keys.state} = 'completed'`)} AS completed,
        ${count(sql`${keys.state} = 'released'`)} AS released,
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

export async function readStats(opened: OpenedDatabase, names: TableNames): Promise<Stats> {
  const q = statsQueries(opened, names);
  const operations = (await rows(opened, q.byOperation)).map((row) => ({
    operation: String(row.operation),
    processing: n(row.processing),
    completed: n(row.completed),
    released: n(row.released),
    archived: n(row.archived),
  }));
  const states: StateCounts = { processing: 0, completed: 0, released: 0, archived: 0 };
  for (const each of operations)
    for (const state of Object.keys(states) as (keyof StateCounts)[]) states[state] += each[state];
  const [oldest] = await rows(opened, q.oldestProcessing);
  const [takeovers] = await rows(opened, q.takeovers);
  const [expired] = await rows(opened, q.expired);
  const [archived] = await rows(opened, q.archived);
  const [history] = await rows(opened, q.history);
  return {
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
