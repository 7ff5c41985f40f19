/**
 * The MySQL statements (mysql2), written to MySQL 8 semantics: no `RETURNING` (MariaDB 10.5+
 * has it, MySQL does not) and no data-modifying CTE. A write answers only its affected-rows
 * count, so a claim that wrote reads its row back by its own token, which no one else holds:
 * a row the read finds is the one this claim wrote. Rule 1 is a plain `INSERT`, and a
 * duplicate-key error (`ER_DUP_ENTRY`) says that the key exists: not `INSERT IGNORE`, which
 * would also turn a truncation into a warning, nor `ON DUPLICATE KEY UPDATE`, whose affected
 * rows depend on the connection's `CLIENT_FOUND_ROWS` flag (a group of claims, where one
 * existing key must not fail the statement, uses it as a no-op and reads its rows back instead
 * of counting them: `claimOrReadMany`). The reuse of an expired key is a
 * short transaction that locks the live row (`SELECT … FOR UPDATE`). Atomic mode holds a named
 * lock (`GET_LOCK(name, 0)`) on the key while its transaction claims and runs the handler, so
 * that a duplicate is answered at once instead of waiting for the uncommitted row.
 */
import { createHash } from 'node:crypto';
import type { ClaimOwner, ClaimRequest, StoredOutcome, StoreTransaction } from '@idem/core/store';
import { and, eq, getTableColumns, getTableName, inArray, sql, type SQL } from 'drizzle-orm';
import { savepointOn, transactionEndingAs } from './atomic-transaction.js';
import { mysqlClock as clock } from './database-clock.js';
import type { AnyMysqlDatabase } from './dialect.js';
import { openTransaction, type TransactionOf } from './owned-transaction.js';
import { MYSQL_COLUMN_BYTES, RECORD_STATES, type MysqlTables } from './mysql-schema.js';
import { toRecord, type LiveRow } from './record-rows.js';
import { ownedClaims, renewByLease, renewedLease } from './renewals.js';
import { sameGeneration, waitsAdded } from './wait-counts.js';
import {
  boundTuples,
  archiving,
  claimParameters,
  claimPlaceholders as b,
  claimValues,
  completion,
  expiredAt,
  freshClaim,
  historyCopy,
  outcomeParameters,
  outcomeValues,
  ownedClaim,
  ownerValues,
  stillExpired,
  stillReleased,
  stillStale,
  takeover,
  thisKey,
  type ClaimBindings,
  type OutcomeBindings,
  type OwnerBindings,
} from './row-writes.js';
import type { FirstStep, StoreStatements } from './store-statements.js';

const param = sql.placeholder;

/** The transaction drizzle hands a transaction's callback. */
type AnyMysqlTransaction = TransactionOf<AnyMysqlDatabase>;
const LIVE_STATES = RECORD_STATES.filter((state) => state !== 'archived');

/**
 * The sweeper's candidates: expired live rows, oldest expiry first, read through the
 * `(state, expires_at)` index (R3) — one range per state that is not `archived`.
 */
export function mysqlSweepCandidates(db: AnyMysqlDatabase, { keys }: MysqlTables, limit: number) {
  return db
    .select({ scope: keys.scope, key: keys.key })
    .from(keys)
    .where(and(inArray(keys.state, LIVE_STATES), expiredAt(clock, keys)))
    .orderBy(keys.expiresAt)
    .limit(limit);
}

/** What mysql2 answers to a write through drizzle: `[ResultSetHeader, fields]`; its affected rows. */
function affectedRows(result: unknown): number {
  const header: unknown = Array.isArray(result) ? result[0] : undefined;
  const count = (header as { affectedRows?: unknown } | undefined)?.affectedRows;
  if (typeof count !== 'number')
    throw new TypeError(
      "[idem] the MySQL driver did not answer a write with mysql2's [ResultSetHeader, fields]: use drizzle-orm/mysql2",
    );
  return count;
}

/** The rows of a `db.execute()` of a SELECT on mysql2: `[rows, fields]`. */
export function executedRows(result: unknown): Array<Record<string, unknown>> {
  const rows: unknown = Array.isArray(result) ? result[0] : undefined;
  if (!Array.isArray(rows))
    throw new TypeError(
      "[idem] the MySQL driver did not answer a query with mysql2's [rows, fields]: use drizzle-orm/mysql2",
    );
  return rows as Array<Record<string, unknown>>;
}

/** Whether the MySQL error `code` (`errno`) is somewhere in drizzle's error chain. */
function hasErrorCode(error: unknown, name: string, errno: number): boolean {
  for (let cause: unknown = error; cause instanceof Error; cause = cause.cause) {
    const found = cause as { code?: unknown; errno?: unknown };
    if (found.code === name || found.errno === errno) return true;
  }
  return false;
}

/** ER_DUP_ENTRY (1062), somewhere in drizzle's error chain. */
const isDuplicateKey = (error: unknown) => hasErrorCode(error, 'ER_DUP_ENTRY', 1062);
/** ER_LOCK_DEADLOCK (1213): InnoDB rolled the whole transaction back, so it did nothing. */
const isDeadlock = (error: unknown) => hasErrorCode(error, 'ER_LOCK_DEADLOCK', 1213);
/** How many times a group transaction that InnoDB chose as a deadlock victim is run again. */
const DEADLOCK_RETRIES = 3;

/** `run()`, again while it fails as a deadlock victim (rolled back whole) up to {@link DEADLOCK_RETRIES} times. */
async function retryingDeadlocks<T>(run: () => Promise<T>): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await run();
    } catch (error) {
      if (attempt >= DEADLOCK_RETRIES || !isDeadlock(error)) throw error;
    }
  }
}

/** One string per (scope, key), for matching a group's rows to its requests. */
const keyOf = (scope: string, key: string): string => `${scope.length}:${scope}${key}`;
/** The bytes of a string as MySQL's `varbinary` columns compare them. */
const byBytes = (a: string, b: string) => Buffer.compare(Buffer.from(a), Buffer.from(b));

/**
 * The `varbinary` columns hold a bounded number of bytes. A longer value is refused here rather
 * than left to the server, which truncates it (and may merge two keys into one) when the
 * session's `sql_mode` is not strict.
 */
function assertFits(request: Pick<ClaimRequest, 'scope' | 'key' | 'token'>): void {
  for (const field of ['scope', 'key', 'token'] as const) {
    const bytes = Buffer.byteLength(request[field], 'utf8');
    const limit = MYSQL_COLUMN_BYTES[field];
    if (bytes > limit)
      throw new RangeError(
        `[idem] MySQL store: the ${field} is ${bytes} bytes long in UTF-8; its column holds at most ${limit}`,
      );
  }
}

/** Whether {@link assertFits} lets `request` through. */
function fits(request: Pick<ClaimRequest, 'scope' | 'key' | 'token'>): boolean {
  return (['scope', 'key', 'token'] as const).every(
    (field) => Buffer.byteLength(request[field], 'utf8') <= MYSQL_COLUMN_BYTES[field],
  );
}

/**
 * The most requests one group statement takes: a claim binds 8 values per row, a completion 6,
 * far below the 65,535 placeholders of MySQL's protocol. The batcher's groups are smaller
 * (`group-commit.ts`); a longer one is refused before anything is written, and the batcher then
 * sends its requests one at a time.
 */
export const MYSQL_MAX_GROUP = 2000;

type Completion = ClaimOwner & { outcome: StoredOutcome };

export function mysqlStatements(db: AnyMysqlDatabase, tables: MysqlTables): StoreStatements {
  const { keys, history } = tables;
  const archivedBefore = (archivedAt: typeof keys.archivedAt | typeof history.archivedAt) =>
    sql`${archivedAt} < ${clock.before(sql`${param('olderThanMs')}`)}`;

  // Built on `db` and prepared, or on a transaction with bound values (atomic mode).
  const claimInsert = (on: AnyMysqlDatabase, b: ClaimBindings) =>
    on.insert(keys).values({ scope: b.scope, key: b.key, generation: sql`1`, ...freshClaim(clock, b) });
  const ownedRow = (on: AnyMysqlDatabase, b: OwnerBindings) =>
    on
      .select()
      .from(keys)
      .where(and(thisKey(keys, b), eq(keys.token, b.token)));
  const completeUpdate = (on: AnyMysqlDatabase, b: OwnerBindings, outcome?: OutcomeBindings) =>
    on
      .update(keys)
      .set(completion(clock, keys, outcome))
      .where(ownedClaim(keys, b));

  const insertClaim = claimInsert(db, b).prepare();
  const readOwned = ownedRow(db, b).prepare();

  const readLive = db
    .select({ ...getTableColumns(keys), now: sql`${clock.now}`.mapWith(keys.createdAt) })
    .from(keys)
    .where(thisKey(keys, b))
    .prepare();

  const reclaimReleased = db
    .update(keys)
    .set(freshClaim(clock, b))
    .where(stillReleased(clock, keys, b))
    .prepare();

  const takeOverStale = db
    .update(keys)
    .set(takeover(clock, b, keys.takeovers))
    .where(stillStale(clock, keys, b))
    .prepare();

  const complete = completeUpdate(db, b).prepare();

  const release = db.update(keys).set({ state: sql`'released'` }).where(ownedClaim(keys, b)).prepare();

  const renew = db
    .update(keys)
    .set(renewedLease(clock, sql`${param('leaseMs')}`))
    .where(ownedClaim(keys, b))
    .prepare();

  const addWaits = db
    .update(keys)
    .set(waitsAdded(keys, sql`${param('count')}`))
    .where(sameGeneration(keys, { scope: b.scope, key: b.key, generation: sql`${param('generation')}` }))
    .prepare();

  const getLive = db.select().from(keys).where(thisKey(keys, b)).prepare();

  const historyOf = db
    .select()
    .from(history)
    .where(and(eq(history.scope, b.scope), eq(history.key, b.key)))
    .orderBy(history.generation)
    .prepare();

  const archivedLive = db
    .select({ scope: keys.scope, key: keys.key })
    .from(keys)
    .where(and(sql`${keys.state} = 'archived'`, archivedBefore(keys.archivedAt)))
    .limit(param('limit'))
    .prepare();

  const archivedHistory = db
    .select({ scope: history.scope, key: history.key, generation: history.generation })
    .from(history)
    .where(archivedBefore(history.archivedAt))
    .limit(param('limit'))
    .prepare();

  /** `(a, b) IN ((…), (…))` over the primary keys a read found. */
  const primaryKeyIn = (columns: SQL[], rows: unknown[][]) =>
    sql`(${sql.join(columns, sql`, `)}) IN (${boundTuples(rows)})`;

  const readLiveRow = async (scope: string, key: string) => {
    const [found] = await readLive.execute({ scope, key });
    if (!found) return undefined;
    const { now, ...row } = found;
    return { row, now };
  };

  /** A claim row this store just wrote, read back by its own token; undefined when it has already changed hands. */
  const readBack = async (request: Pick<ClaimRequest, 'scope' | 'key' | 'token'>): Promise<LiveRow | undefined> => {
    const [row] = await readOwned.execute({ scope: request.scope, key: request.key, token: request.token });
    return row;
  };

  /** Rule 1: the inserted row, or undefined when the key exists (the caller then reads it). */
  const insertClaimRow = async (request: ClaimRequest): Promise<LiveRow | undefined> => {
    assertFits(request);
    try {
      await insertClaim.execute(claimParameters(request));
    } catch (error) {
      if (isDuplicateKey(error)) return undefined;
      throw error;
    }
    return readBack(request);
  };

  /**
   * Atomic mode's statements on the transaction `tx`, and the named lock its claim took. The
   * lock is MySQL's `GET_LOCK`, held by the connection (not the transaction), so the
   * transaction releases it before it commits or rolls back: its pool connection must not
   * carry it to the next user.
   */
  const within = (tx: AnyMysqlTransaction) => {
    let lock: string | undefined;
    const statements: StoreTransaction = {
      async insertClaim(request) {
        assertFits(request);
        // At most 64 characters (MySQL): a digest of the table, scope and key.
        const name = `idem:${createHash('sha256')
          .update(JSON.stringify([getTableName(keys), request.scope, request.key]))
          .digest('base64url')}`;
        const [answer] = executedRows(await tx.execute(sql`SELECT GET_LOCK(${name}, 0) AS got`));
        const got = Number(answer?.got);
        if (got !== 1) {
          if (got === 0) return { outcome: 'inProgress' };
          throw new Error(`[idem] MySQL GET_LOCK answered ${String(answer?.got)} for atomic mode's claim`);
        }
        lock = name;
        try {
          await claimInsert(tx, claimValues(request, '')).execute();
        } catch (error) {
          // A duplicate key rolls back this statement only, not the transaction.
          if (isDuplicateKey(error)) return { outcome: 'exists' };
          throw error;
        }
        const [row] = await ownedRow(tx, ownerValues(request));
        if (!row) throw new Error('[idem] the claim atomic mode inserted could not be read back');
        return { outcome: 'claimed', record: toRecord(row) };
      },
      async lockOwned(owner) {
        const [row] = await tx
          .select()
          .from(keys)
          .where(ownedClaim(keys, ownerValues(owner)))
          .for('update');
        return row ? toRecord(row) : null;
      },
      async complete({ outcome, ...owner }) {
        return affectedRows(await completeUpdate(tx, ownerValues(owner), outcomeValues(outcome))) === 1;
      },
      savepoint: savepointOn(tx),
    };
    const releaseLock = async () => {
      if (lock === undefined) return;
      const name = lock;
      lock = undefined;
      await tx.execute(sql`SELECT RELEASE_LOCK(${name})`);
    };
    return { statements, releaseLock };
  };

  const assertGroupFits = (length: number) => {
    if (length > MYSQL_MAX_GROUP)
      throw new RangeError(`[idem] MySQL store: a group of ${length} requests; at most ${MYSQL_MAX_GROUP}`);
  };
  const liveSelection = { ...getTableColumns(keys), now: sql`${clock.now}`.mapWith(keys.createdAt) };
  /** The live rows of a group's keys with the clock, by {@link keyOf}. */
  const readLiveMany = async (on: AnyMysqlDatabase | AnyMysqlTransaction, pairs: Array<[string, string]>) => {
    const found = new Map<string, { row: LiveRow; now: Date }>();
    const rows = await on
      .select(liveSelection)
      .from(keys)
      .where(primaryKeyIn([sql`${keys.scope}`, sql`${keys.key}`], pairs));
    for (const { now, ...row } of rows) found.set(keyOf(row.scope, row.key), { row, now });
    return found;
  };

  /**
   * Group commit's first step. One read of the live rows (no lock, as `claimOrRead`'s); then, for
   * the misses, one transaction: a multi-row `INSERT … ON DUPLICATE KEY UPDATE scope = scope`
   * (a no-op on a key that exists meanwhile, whichever `CLIENT_FOUND_ROWS` says; unlike `INSERT
   * IGNORE`, a value too long for its column stays an error), and one read of those keys. The
   * read is the transaction's first consistent read, so under REPEATABLE READ as under READ
   * COMMITTED it sees every row the insert collided with (the insert waited for its lock, so it
   * is committed); a row holding the request's own token is the one this group wrote (tokens are
   * never shared), any other is the live row the request found. In one transaction, a failed
   * group wrote nothing: no claim is left behind without its answer. Rows go in primary-key
   * order, so two groups lock shared keys in one order; a deadlock victim rolled back whole and
   * is run again. A key twice in the group: the first request inserts, a later one reads the
   * first one's row. A request whose scope, key or token does not fit its column is left to the
   * one-request path (undefined: the store reads again and then inserts it alone), which refuses
   * it alone.
   */
  async function claimOrReadMany(requests: ClaimRequest[]): Promise<Array<FirstStep | undefined>> {
    assertGroupFits(requests.length);
    const admitted = requests.filter(fits);
    const found =
      admitted.length > 0
        ? await readLiveMany(
            db,
            admitted.map((r) => [r.scope, r.key]),
          )
        : new Map();
    const misses = new Map<string, ClaimRequest>();
    const winners = new Set<number>();
    for (const [i, request] of requests.entries()) {
      const id = keyOf(request.scope, request.key);
      if (!fits(request) || found.has(id) || misses.has(id)) continue;
      misses.set(id, request);
      winners.add(i);
    }
    const written =
      misses.size === 0
        ? new Map<string, { row: LiveRow; now: Date }>()
        : await retryingDeadlocks(() =>
            openTransaction(db, async (tx) => {
              const rows = [...misses.values()].sort((a, b) => byBytes(a.scope, b.scope) || byBytes(a.key, b.key));
              await tx
                .insert(keys)
                .values(
                  rows.map((request) => {
                    const v = claimValues(request, '');
                    return { scope: v.scope, key: v.key, generation: sql`1`, ...freshClaim(clock, v) };
                  }),
                )
                .onDuplicateKeyUpdate({ set: { scope: sql`${keys.scope}` } });
              return readLiveMany(
                tx,
                rows.map((r) => [r.scope, r.key]),
              );
            }),
          );
    return requests.map((request, i): FirstStep | undefined => {
      const id = keyOf(request.scope, request.key);
      if (!fits(request)) return undefined;
      const live = found.get(id);
      if (live) return { live };
      const mine = written.get(id);
      if (!mine) return undefined;
      return winners.has(i) && mine.row.token === request.token ? { inserted: mine.row } : { live: mine };
    });
  }

  /**
   * Group commit's completions, in one transaction: a locking read (`FOR UPDATE`) of the group's
   * rows still owned as `complete` asks (`ownedClaim`: that token's `processing` claim), then one
   * `UPDATE … JOIN (SELECT … UNION ALL …)` of exactly those rows. The lock keeps every row the
   * read found owned until the commit, so the rows it found are the rows completed: MySQL answers
   * a multi-table update with one affected-rows count, not which rows. Locked in primary-key
   * order (the read's range scan); a deadlock victim rolled back whole and is run again.
   */
  async function completeMany(completions: Completion[]): Promise<boolean[]> {
    assertGroupFits(completions.length);
    const owned = (scope: string, key: string, token: string) => `${keyOf(scope, key)}\u0000${token}`;
    const completed = await retryingDeadlocks(() =>
      openTransaction(db, async (tx) => {
        const locked = await tx
          .select({ scope: keys.scope, key: keys.key, token: keys.token })
          .from(keys)
          .where(
            and(
              primaryKeyIn(
                [sql`${keys.scope}`, sql`${keys.key}`, sql`${keys.token}`],
                completions.map(({ scope, key, token }) => [scope, key, token]),
              ),
              sql`${keys.state} = 'processing'`,
            ),
          )
          .for('update');
        const mine = new Set(locked.map((row) => owned(row.scope, row.key, row.token)));
        const rows = completions.filter(({ scope, key, token }) => mine.has(owned(scope, key, token)));
        if (rows.length === 0) return mine;
        // One row per owner: a completion twice in the group completes once (the first).
        const once = [...new Map(rows.map((row) => [owned(row.scope, row.key, row.token), row])).values()];
        const source = sql.join(
          once.map(({ scope, key, token, outcome }, i) =>
            i === 0
              ? sql`SELECT ${scope} AS ${sql.identifier('scope')}, ${key} AS ${sql.identifier('key')}, ${token} AS ${sql.identifier('token')}, ${outcome.kind} AS ${sql.identifier('kind')}, ${outcome.status} AS ${sql.identifier('status')}, ${outcome.body} AS ${sql.identifier('body')}`
              : sql`SELECT ${scope}, ${key}, ${token}, ${outcome.kind}, ${outcome.status}, ${outcome.body}`,
          ),
          sql` UNION ALL `,
        );
        const v = (name: string) => sql`${sql.identifier('v')}.${sql.identifier(name)}`;
        const assignments = completion(clock, keys, { kind: v('kind'), status: v('status'), body: v('body') });
        const columns = getTableColumns(keys);
        const set = sql.join(
          Object.entries(assignments).map(
            ([name, value]) => sql`${columns[name as keyof typeof assignments]} = ${value}`,
          ),
          sql`, `,
        );
        const updated = affectedRows(
          await tx.execute(
            sql`UPDATE ${keys} JOIN (${source}) AS ${sql.identifier('v')} ON ${keys.scope} = ${v('scope')} AND ${keys.key} = ${v('key')} AND ${keys.token} = ${v('token')} SET ${set} WHERE ${keys.state} = 'processing'`,
          ),
        );
        if (updated !== once.length)
          throw new Error(`[idem] MySQL store: ${once.length} locked claims, but ${updated} were completed`);
        return mine;
      }),
    );
    return completions.map(({ scope, key, token }) => completed.delete(owned(scope, key, token)));
  }

  return {
    claimOrReadMany,
    completeMany,
    groupMode: 'inFlight',
    transaction: (work) =>
      transactionEndingAs(
        (body: (tx: AnyMysqlTransaction) => Promise<void>) => openTransaction(db, body),
        async (tx) => {
          const { statements, releaseLock } = within(tx);
          // Released before the COMMIT: a duplicate arriving in between waits for the commit
          // (milliseconds, not the handler) and then finds the key.
          try {
            return await work(statements);
          } finally {
            await releaseLock();
          }
        },
      ),
    insertClaim: insertClaimRow,
    // Read first: a replay is this one SELECT. A new key adds the INSERT and the read of the
    // row it wrote (no RETURNING); the loop in the store settles an insert that lost a race.
    async claimOrRead(request) {
      const live = await readLiveRow(request.scope, request.key);
      if (live) return { live };
      const inserted = await insertClaimRow(request);
      return inserted && { inserted };
    },
    readLive: readLiveRow,
    async reclaimReleased(request, releasedToken) {
      assertFits(request);
      if (affectedRows(await reclaimReleased.execute(claimParameters(request, releasedToken))) !== 1) return undefined;
      return readBack(request);
    },
    async takeOverStale(request, staleToken) {
      assertFits(request);
      if (affectedRows(await takeOverStale.execute(claimParameters(request, staleToken))) !== 1) return undefined;
      return readBack(request);
    },
    async reuseExpired(request, seen) {
      assertFits(request);
      const v = claimValues(request, seen.token);
      return openTransaction(db, async (tx) => {
        const [locked] = await tx
          .select({ token: keys.token })
          .from(keys)
          .where(stillExpired(clock, keys, v, seen.generation))
          .for('update');
        if (!locked) return undefined;
        const copied = affectedRows(
          await tx.insert(history).select(
            tx
              .select(historyCopy(getTableColumns(keys), clock))
              .from(keys)
              .where(thisKey(keys, v)),
          ),
        );
        const turned = affectedRows(
          await tx
            .update(keys)
            .set({ ...freshClaim(clock, v), generation: sql`${keys.generation} + 1` })
            .where(and(thisKey(keys, v), eq(keys.token, v.previousToken))),
        );
        if (copied !== 1 || turned !== 1)
          throw new Error('[idem] the locked row vanished during the reuse of an expired key');
        const [archived] = await tx
          .select()
          .from(history)
          .where(and(eq(history.scope, v.scope), eq(history.key, v.key), eq(history.generation, seen.generation)));
        const [record] = await ownedRow(tx, ownerValues(request));
        if (!archived || !record) throw new Error('[idem] the reuse of an expired key did not read back what it wrote');
        return { record, archived };
      });
    },
    async complete({ scope, key, token, outcome }) {
      return affectedRows(await complete.execute({ scope, key, token, ...outcomeParameters(outcome) })) === 1;
    },
    async release({ scope, key, token }) {
      return affectedRows(await release.execute({ scope, key, token })) === 1;
    },
    async renew({ scope, key, token, leaseMs }) {
      return affectedRows(await renew.execute({ scope, key, token, leaseMs })) === 1;
    },
    // MySQL has no RETURNING: one UPDATE renews the group, and when it renewed fewer rows than it
    // names (a claim taken over or completed meanwhile, which is rare), each one is asked alone.
    renewMany: (renewals) =>
      renewByLease(renewals, async (leaseMs, owners) => {
        const renewed = affectedRows(
          await db
            .update(keys)
            .set(renewedLease(clock, sql`${leaseMs}`))
            .where(ownedClaims(keys, owners, (rows) => sql`(${boundTuples(rows)})`)),
        );
        if (renewed === owners.length) return owners;
        const alone = await Promise.all(
          owners.map(async (owner) => affectedRows(await renew.execute({ ...owner, leaseMs })) === 1 && owner),
        );
        return alone.filter((owner): owner is ClaimOwner => owner !== false);
      }),
    async addWaits({ scope, key, generation }, count) {
      return affectedRows(await addWaits.execute({ scope, key, generation, count })) === 1;
    },
    async getLive(scope, key) {
      const [row] = await getLive.execute({ scope, key });
      return row;
    },
    history: (scope, key) => historyOf.execute({ scope, key }),
    // Sweep and purge read their candidates, then write them by primary key with the condition
    // repeated: row locks only (no range or gap locks that would hold up new claims), nothing
    // waits on a row a concurrent sweeper took first, and no `LIMIT` on a write, which
    // statement-based replication refuses to trust.
    async sweep(limit) {
      const candidates = await mysqlSweepCandidates(db, tables, limit);
      if (candidates.length === 0) return 0;
      return affectedRows(
        await db
          .update(keys)
          .set(archiving(clock))
          .where(
            and(
              primaryKeyIn(
                [sql`${keys.scope}`, sql`${keys.key}`],
                candidates.map((row) => [row.scope, row.key]),
              ),
              inArray(keys.state, LIVE_STATES),
              expiredAt(clock, keys),
            ),
          ),
      );
    },
    async purgeLive(olderThanMs, limit) {
      const candidates = await archivedLive.execute({ olderThanMs, limit });
      if (candidates.length === 0) return 0;
      return affectedRows(
        await db.delete(keys).where(
          and(
            primaryKeyIn(
              [sql`${keys.scope}`, sql`${keys.key}`],
              candidates.map((row) => [row.scope, row.key]),
            ),
            sql`${keys.state} = 'archived'`,
            sql`${keys.archivedAt} < ${clock.before(sql`${olderThanMs}`)}`,
          ),
        ),
      );
    },
    async purgeHistory(olderThanMs, limit) {
      const candidates = await archivedHistory.execute({ olderThanMs, limit });
      if (candidates.length === 0) return 0;
      return affectedRows(
        await db.delete(history).where(
          and(
            primaryKeyIn(
              [sql`${history.scope}`, sql`${history.key}`, sql`${history.generation}`],
              candidates.map((row) => [row.scope, row.key, row.generation]),
            ),
            sql`${history.archivedAt} < ${clock.before(sql`${olderThanMs}`)}`,
          ),
        ),
      );
    },
    async ping() {
      await db.execute(sql`SELECT 1`);
    },
  };
}
