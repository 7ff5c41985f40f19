/**
 * The SQLite statements, prepared once per store, for a synchronous driver (better-sqlite3) and
 * an asynchronous one (libsql) alike: each step is written with `chain`, so it stays synchronous
 * where the driver answers at once. SQLite has a single writer, so each statement is atomic on
 * its own; the reuse of an expired key runs in a `BEGIN IMMEDIATE` transaction, built on the
 * transaction's own handle (libsql gives a transaction a connection of its own; better-sqlite3's
 * transaction must not contain an `await`). Atomic mode runs the same statements inside such a
 * transaction, around a handler that must be synchronous on better-sqlite3 and may await on
 * libsql. A statement that finds the database locked by another connection is retried without
 * blocking the event loop (`sqlite-busy.ts`).
 */
import type { ClaimRequest } from '@idem/core/store';
import { and, eq, getTableColumns, sql, type Placeholder, type SQL } from 'drizzle-orm';
import { sqliteClock as clock } from './database-clock.js';
import type { AnySQLiteDatabase, Driver } from './dialect.js';
import { assertLiveReadOrder, liveRowOfValues, nowOfValues } from './drizzle-seams.js';
import { chain, isThenable, type Eventually } from './eventually.js';
import { isSqliteBusy, whileBusy } from './sqlite-busy.js';
import { isStillExpiredGeneration, type HistoryRow, type LiveRow } from './record-rows.js';
import {
  archiving,
  claimParameters,
  claimPlaceholders as b,
  completion,
  expiredAt,
  freshClaim,
  historyCopy,
  outcomeParameters,
  takeover,
} from './row-writes.js';
import type { SqliteTables } from './sqlite-schema.js';
import type { StoreStatements, TransactionStatements } from './store-statements.js';

const SYNCHRONOUS_HANDLER_REQUIRED =
  '[idem] atomic mode on SQLite needs a synchronous handler: better-sqlite3 transactions cannot span an await';

const param = sql.placeholder;

/** The sweeper's candidates: expired live rows, read through the partial expiry index (R3). */
export function sqliteSweepCandidates(db: AnySQLiteDatabase, { keys }: SqliteTables, limit: number | Placeholder) {
  return db
    .select({ scope: keys.scope, key: keys.key })
    .from(keys)
    .where(and(sql`${keys.state} <> 'archived'`, expiredAt(clock, keys)))
    .orderBy(keys.expiresAt)
    .limit(limit);
}

/** The store's statements over `db`; each one retried for up to `busyRetryMs` while another connection holds the write lock. */
export function sqliteStatements(
  db: AnySQLiteDatabase,
  tables: SqliteTables,
  driver: Driver,
  busyRetryMs: number,
): StoreStatements {
  const statements = withBusyRetry(statementsOf(db, tables, driver), busyRetryMs);
  return driver.transactions === 'asynchronous' ? oneWriterAtATime(statements) : statements;
}

/** The statements that only read: they never wait for the write lock (WAL). */
const READS = new Set<string>(['readLive', 'getLive', 'history', 'ping']);

/**
 * libsql on a local file: the store's writes (and transactions) in this process one at a time,
 * through an asynchronous queue, so that they never contend for SQLite's write lock with each
 * other. libsql answers through promises but runs each statement synchronously on one of its
 * pooled connections; two of them contending in one process would either wait in SQLite's busy
 * handler, blocking the event loop while the other's transaction waits for it to turn, or fail
 * with SQLITE_BUSY, and a statement libsql fails that way stays in progress until it is garbage
 * collected, holding the lock on its connection (tursodatabase/libsql-client-ts#352). Other
 * processes are waited for by the connection's busy timeout (`openDatabase` sets one).
 * A replay's read is not queued: WAL readers never wait.
 */
function oneWriterAtATime(statements: StoreStatements): StoreStatements {
  let tail: Promise<unknown> = Promise.resolve();
  const queued = <T>(run: () => Eventually<T>): Promise<T> => {
    const result = tail.then(run);
    tail = result.then(
      () => undefined,
      () => undefined,
    );
    return result;
  };
  const wrapped = { ...statements } as Record<string, unknown>;
  for (const [name, value] of Object.entries(statements)) {
    if (typeof value !== 'function' || READS.has(name) || name === 'claimOrRead') continue;
    wrapped[name] = (...args: unknown[]) =>
      queued(() => (value as (...a: unknown[]) => Eventually<unknown>).apply(statements, args));
  }
  const insertClaim = wrapped.insertClaim as StoreStatements['insertClaim'];
  // Read first, unqueued (a replay); a miss queues the insert.
  wrapped.claimOrRead = (request: ClaimRequest) =>
    chain(statements.readLive(request.scope, request.key), (live) =>
      live ? { live } : chain(insertClaim(request), (inserted) => inserted && { inserted }),
    );
  return wrapped as unknown as StoreStatements;
}

/**
 * Every statement run again while SQLite answers `SQLITE_BUSY`, asynchronously (`whileBusy`): a
 * busy statement did nothing. Atomic mode's transaction only until its work begins — `BEGIN
 * IMMEDIATE` finding the lock taken — never once the handler may have run.
 */
function withBusyRetry(statements: StoreStatements, timeoutMs: number): StoreStatements {
  const wrapped = { ...statements } as Record<string, unknown>;
  for (const [name, value] of Object.entries(statements)) {
    if (typeof value !== 'function' || name === 'transaction') continue;
    wrapped[name] = (...args: unknown[]) =>
      whileBusy(() => (value as (...a: unknown[]) => unknown).apply(statements, args), timeoutMs);
  }
  const transaction = <R>(work: (t: TransactionStatements) => Eventually<R>): Promise<R> => {
    let started = false;
    const attempt = () => {
      started = false;
      return statements.transaction((t) => {
        started = true;
        return work(t);
      });
    };
    return whileBusy(attempt, timeoutMs, (error) => !started && isSqliteBusy(error)) as Promise<R>;
  };
  wrapped.transaction = transaction;
  return wrapped as unknown as StoreStatements;
}

function statementsOf(db: AnySQLiteDatabase, tables: SqliteTables, driver: Driver): StoreStatements {
  const { keys, history } = tables;
  const thisKey = and(eq(keys.scope, b.scope), eq(keys.key, b.key));
  const ownedBy = (token: SQL) => eq(keys.token, token);
  const archivedBefore = (archivedAt: SQL | typeof keys.archivedAt) =>
    sql`${archivedAt} < ${clock.before(sql`${param('olderThanMs')}`)}`;
  const synchronous = driver.transactions === 'synchronous';

  // Built on `db` and prepared once, or on a transaction's handle (prepared there: libsql runs a
  // transaction on a connection of its own).
  const insertClaimOn = (on: AnySQLiteDatabase) =>
    on
      .insert(keys)
      .values({ scope: b.scope, key: b.key, generation: sql`1`, ...freshClaim(clock, b) })
      .onConflictDoNothing({ target: [keys.scope, keys.key] })
      .returning();
  // The hot read of the replay path, taken as arrays and mapped by position (drizzle-seams.ts).
  const liveSelection = { ...getTableColumns(keys), now: sql`${clock.now}`.mapWith(keys.createdAt) };
  assertLiveReadOrder(liveSelection);
  const readLiveOn = (on: AnySQLiteDatabase) => on.select(liveSelection).from(keys).where(thisKey);
  const readOwnedOn = (on: AnySQLiteDatabase) =>
    on
      .select()
      .from(keys)
      .where(and(thisKey, ownedBy(b.token), sql`${keys.state} = 'processing'`));
  const completeOn = (on: AnySQLiteDatabase) =>
    on
      .update(keys)
      .set(completion(clock, keys))
      .where(and(thisKey, ownedBy(b.token), sql`${keys.state} = 'processing'`))
      .returning({ token: keys.token });
  const archiveIntoHistoryOn = (on: AnySQLiteDatabase) =>
    on
      .insert(history)
      .select(
        on
          .select(historyCopy(getTableColumns(keys), clock))
          .from(keys)
          .where(thisKey),
      )
      .returning();
  const nextGenerationOn = (on: AnySQLiteDatabase) =>
    on
      .update(keys)
      .set({ ...freshClaim(clock, b), generation: sql`${keys.generation} + 1` })
      .where(and(thisKey, ownedBy(b.previousToken)))
      .returning();

  const insertClaim = insertClaimOn(db).prepare();
  const readLive = readLiveOn(db).prepare();
  // Arrays (`values()`) for the insert too: it steps the insert to SQLITE_DONE, which lets the WAL auto-checkpoint run.
  const insertedRow = (rows: ArrayLike<unknown>[]): LiveRow | undefined =>
    rows[0] ? liveRowOfValues(rows[0]) : undefined;
  const liveRowRead = (rows: ArrayLike<unknown>[]): { row: LiveRow; now: Date } | undefined =>
    rows[0] ? { row: liveRowOfValues(rows[0]), now: nowOfValues(rows[0]) } : undefined;
  const insertClaimRow = (request: ClaimRequest): Eventually<LiveRow | undefined> =>
    chain(insertClaim.values(claimParameters(request)), insertedRow);
  const readLiveRow = (scope: string, key: string): Eventually<{ row: LiveRow; now: Date } | undefined> =>
    chain(readLive.values({ scope, key }), liveRowRead);

  const reclaimReleased = db
    .update(keys)
    .set(freshClaim(clock, b))
    .where(
      and(thisKey, ownedBy(b.previousToken), sql`${keys.state} = 'released'`, sql`${keys.expiresAt} > ${clock.now}`),
    )
    .returning()
    .prepare();

  const takeOverStale = db
    .update(keys)
    .set(takeover(clock, b, keys.takeovers))
    .where(
      and(
        thisKey,
        ownedBy(b.previousToken),
        sql`${keys.state} = 'processing'`,
        sql`${keys.leaseUntil} <= ${clock.now}`,
        sql`${keys.expiresAt} > ${clock.now}`,
      ),
    )
    .returning()
    .prepare();

  const complete = completeOn(db).prepare();

  const release = db
    .update(keys)
    .set({ state: sql`'released'` })
    .where(and(thisKey, ownedBy(b.token), sql`${keys.state} = 'processing'`))
    .returning({ token: keys.token })
    .prepare();

  const getLive = db.select().from(keys).where(thisKey).prepare();

  const historyOf = db
    .select()
    .from(history)
    .where(and(eq(history.scope, b.scope), eq(history.key, b.key)))
    .orderBy(history.generation)
    .prepare();

  const sweep = db
    .update(keys)
    .set(archiving(clock))
    .where(sql`(${keys.scope}, ${keys.key}) IN ${sqliteSweepCandidates(db, tables, param('limit'))}`)
    .returning({ token: keys.token })
    .prepare();

  const purgeLive = db
    .delete(keys)
    .where(
      sql`(${keys.scope}, ${keys.key}) IN ${db
        .select({ scope: keys.scope, key: keys.key })
        .from(keys)
        .where(and(sql`${keys.state} = 'archived'`, archivedBefore(keys.archivedAt)))
        .limit(param('limit'))}`,
    )
    .returning({ token: keys.token })
    .prepare();

  const purgeHistory = db
    .delete(history)
    .where(
      sql`(${history.scope}, ${history.key}, ${history.generation}) IN ${db
        .select({ scope: history.scope, key: history.key, generation: history.generation })
        .from(history)
        .where(archivedBefore(sql`${history.archivedAt}`))
        .limit(param('limit'))}`,
    )
    .returning({ token: history.token })
    .prepare();

  /** `work` in one `BEGIN IMMEDIATE` transaction, on its own handle; synchronous on a synchronous driver. */
  const immediately = <R>(work: (tx: AnySQLiteDatabase) => Eventually<R>): Promise<R> | R =>
    db.transaction(
      (tx) => {
        const done = work(tx as unknown as AnySQLiteDatabase);
        if (synchronous && isThenable(done))
          throw new TypeError('[idem] a SQLite transaction cannot wait for a promise');
        return done as R;
      },
      { behavior: 'immediate' },
    ) as Promise<R> | R;

  /** Atomic mode's statements inside the transaction `tx`, the write lock held since `BEGIN IMMEDIATE`. */
  const within = (tx: AnySQLiteDatabase): TransactionStatements => ({
    insertClaim: (request) => chain(insertClaimOn(tx).prepare().values(claimParameters(request)), insertedRow),
    lockOwned: (owner) => readOwnedOn(tx).prepare().get(owner) as Eventually<LiveRow | undefined>,
    complete: ({ scope, key, token, outcome }) =>
      chain(
        completeOn(tx)
          .prepare()
          .all({ scope, key, token, ...outcomeParameters(outcome) }),
        (rows) => rows.length === 1,
      ),
    savepoint(run) {
      if (!synchronous) {
        return (tx.transaction(async (savepoint) => run(savepoint)) as Promise<Awaited<ReturnType<typeof run>>>).then(
          (value) => ({ ok: true as const, value }),
          (error: unknown) => ({ ok: false as const, error }),
        );
      }
      const refusal = new TypeError(SYNCHRONOUS_HANDLER_REQUIRED);
      try {
        const value = tx.transaction((savepoint) => {
          const result = run(savepoint);
          if (isThenable(result)) {
            // Refused, not awaited: its rejection must not surface as an unhandled one.
            result.then(undefined, () => {});
            throw refusal;
          }
          return result;
        });
        return { ok: true, value: value as Awaited<ReturnType<typeof run>> };
      } catch (error) {
        if (error === refusal) throw error;
        return { ok: false, error };
      }
    },
  });

  return {
    atomicHandlers: driver.transactions,
    async transaction(work) {
      return immediately((tx) => work(within(tx)));
    },
    async insertClaim(request) {
      return insertClaimRow(request);
    },
    // Read first: a replay is this one SELECT; a new key adds a miss of a few µs to a claim of
    // ≈80 µs (two WAL writes). The loop in the store settles an insert that lost to another process.
    claimOrRead(request) {
      return chain(readLiveRow(request.scope, request.key), (live) =>
        live ? { live } : chain(insertClaimRow(request), (inserted) => inserted && { inserted }),
      );
    },
    async readLive(scope, key) {
      return readLiveRow(scope, key);
    },
    async reclaimReleased(request, releasedToken) {
      return (await reclaimReleased.get(claimParameters(request, releasedToken))) as LiveRow | undefined;
    },
    async takeOverStale(request, staleToken) {
      return (await takeOverStale.get(claimParameters(request, staleToken))) as LiveRow | undefined;
    },
    async reuseExpired(request, seen) {
      const parameters = claimParameters(request, seen.token);
      return immediately((tx) =>
        chain(
          chain(readLiveOn(tx).prepare().values({ scope: request.scope, key: request.key }), liveRowRead),
          (locked) => {
            if (!locked || !isStillExpiredGeneration(locked.row, seen, locked.now)) return undefined;
            return chain(archiveIntoHistoryOn(tx).prepare().get(parameters), (archived) =>
              chain(nextGenerationOn(tx).prepare().get(parameters), (record) => ({
                record: record as LiveRow,
                archived: archived as HistoryRow,
              })),
            );
          },
        ),
      );
    },
    async complete({ scope, key, token, outcome }) {
      return (await complete.all({ scope, key, token, ...outcomeParameters(outcome) })).length === 1;
    },
    async release({ scope, key, token }) {
      return (await release.all({ scope, key, token })).length === 1;
    },
    async getLive(scope, key) {
      return (await getLive.get({ scope, key })) as LiveRow | undefined;
    },
    async history(scope, key) {
      return (await historyOf.all({ scope, key })) as HistoryRow[];
    },
    async sweep(limit) {
      return (await sweep.all({ limit })).length;
    },
    async purgeLive(olderThanMs, limit) {
      return (await purgeLive.all({ olderThanMs, limit })).length;
    },
    async purgeHistory(olderThanMs, limit) {
      return (await purgeHistory.all({ olderThanMs, limit })).length;
    },
    async ping() {
      await db.get(sql`SELECT 1`);
    },
  };
}
