/**
 * The database clock (R1): every timestamp the store writes and every expiry it compares is
 * computed by the database, in epoch-millisecond precision, never by the application.
 */
import { sql, type SQL, type SQLWrapper } from 'drizzle-orm';

export interface DatabaseClock {
  /** The database's current time, truncated to milliseconds. */
  now: SQL;
  /** `now` plus a duration in milliseconds. */
  after(ms: SQL): SQL;
  /** `now` minus a duration in milliseconds. */
  before(ms: SQL): SQL;
  /** `now` plus the time from the timestamp `from` to the timestamp `to`. */
  afterSpan(from: SQLWrapper, to: SQLWrapper): SQL;
}

/**
 * SQLite stores integer epoch milliseconds. `julianday('now')` has millisecond precision and
 * is fixed for the duration of one statement, so all timestamps a statement writes agree.
 */
const sqliteNow = sql`CAST(ROUND((julianday('now') - 2440587.5) * 86400000) AS INTEGER)`;
export const sqliteClock: DatabaseClock = {
  now: sqliteNow,
  after: (ms) => sql`(${sqliteNow} + CAST(${ms} AS INTEGER))`,
  before: (ms) => sql`(${sqliteNow} - CAST(${ms} AS INTEGER))`,
  afterSpan: (from, to) => sql`(${sqliteNow} + (${to} - ${from}))`,
};

/**
 * PostgreSQL: `now()` is the transaction's start, the same for every use within a statement
 * (or within the reuse transaction), truncated to the milliseconds a JS `Date` can carry.
 */
const postgresNow = sql`date_trunc('milliseconds', now())`;
export const postgresClock: DatabaseClock = {
  now: postgresNow,
  after: (ms) => sql`(${postgresNow} + ${ms}::double precision * interval '1 millisecond')`,
  before: (ms) => sql`(${postgresNow} - ${ms}::double precision * interval '1 millisecond')`,
  afterSpan: (from, to) => sql`(${postgresNow} + (${to} - ${from}))`,
};

/**
 * PostgreSQL's clock at the start of the current statement. In a one-statement transaction it is
 * `postgresClock`; in atomic mode, where the handler runs between the claim and the completion
 * in one transaction, it gives the completion its own time instead of the claim's.
 */
const postgresStatementNow = sql`date_trunc('milliseconds', statement_timestamp())`;
export const postgresStatementClock: DatabaseClock = {
  now: postgresStatementNow,
  after: (ms) => sql`(${postgresStatementNow} + ${ms}::double precision * interval '1 millisecond')`,
  before: (ms) => sql`(${postgresStatementNow} - ${ms}::double precision * interval '1 millisecond')`,
  afterSpan: (from, to) => sql`(${postgresStatementNow} + (${to} - ${from}))`,
};

/**
 * MySQL and MariaDB: `UTC_TIMESTAMP(3)`, evaluated once per statement (each statement of a
 * transaction has its own, so atomic mode's completion gets its own time). UTC whatever the
 * session's `time_zone`, into `datetime(3)` columns, which drizzle reads as UTC. Datetime
 * arithmetic goes through `TIMESTAMPADD`/`TIMESTAMPDIFF` in microseconds: `-` on two
 * datetimes subtracts them as numbers (YYYYMMDDhhmmss.fff), not as times.
 */
const mysqlNow = sql`UTC_TIMESTAMP(3)`;
export const mysqlClock: DatabaseClock = {
  now: mysqlNow,
  after: (ms) => sql`TIMESTAMPADD(MICROSECOND, ROUND(${ms} * 1000), ${mysqlNow})`,
  before: (ms) => sql`TIMESTAMPADD(MICROSECOND, -ROUND(${ms} * 1000), ${mysqlNow})`,
  afterSpan: (from, to) => sql`TIMESTAMPADD(MICROSECOND, TIMESTAMPDIFF(MICROSECOND, ${from}, ${to}), ${mysqlNow})`,
};
