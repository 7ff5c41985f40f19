/**
 * The SQLite statements, prepared once per store, for a synchronous driver (better-sqlite3) and
 * an asynchronous one (libsql) alike. SQLite has a single writer, so each statement is atomic on
 * its own; the reuse of an expired key is two guarded statements in one `BEGIN IMMEDIATE`
 * transaction. Atomic mode runs on libsql, whose transaction holds a connection of its own and
 * may await; better-sqlite3's transaction is one synchronous call that cannot span the handler's
 * `await`s, so the store has no atomic mode there. A statement that finds the database locked by
 * another connection is retried without blocking the event loop (`sqlite-busy.ts`).
 */
import type { ClaimRequest, StoreTransaction } from '@idem/core/store';
import { and, eq, getTableColumns, sql, type Placeholder, type SQL } from 'drizzle-orm';
import { savepointOn, transactionEndingAs } from './atomic-transaction.js';
import { sqliteClock as clock } from './database-clock.js';
import type {
  AnySQLiteDatabase,
  AsyncSQLiteDatabase,
  SQLiteDatabaseOf as SqliteOf,
  SqliteDatabase,
} from './dialect.js';
import { assertLiveReadOrder, liveRowOfValues, nowOfValues } from './drizzle-seams.js';
import { toRecord, type LiveRead, type LiveRow } from './record-rows.js';
import {
  archiving,
  claimParameters,
  claimPlaceholders as b,
  completion,
  expiredAt,
  freshClaim,
  historyCopy,
  outcomeParameters,
  ownedClaim,
  stillExpired,
  stillReleased,
  stillStale,
  takeover,
  thisKey,
} from './row-writes.js';
import type { SqliteTables } from './sqlite-schema.js';
import { isSqliteBusy, whileBusy } from './sqlite-busy.js';
import type { StoreStatements } from './store-statements.js';

const param = sql.placeholder;

/** The transaction libsql's `db.transaction(…)` hands its callback. */
type AsyncSQLiteTransaction = Parameters<Parameters<AsyncSQLiteDatabase['transaction']>[0]>[0];

/** The sweeper's candidates: expired live rows, read through the partial expiry index (R3). */
export function sqliteSweepCandidates(db: AnySQLiteDatabase, { keys }: SqliteTables, limit: number | Placeholder) {
  return db
    .select({ scope: keys.scope, key: keys.key })
    .from(keys)
    .where(and(sql`${keys.state} <> 'archived'`, expiredAt(clock, keys)))
    .orderBy(keys.expiresAt)
    .limit(limit);
}

/**
 * A queue of the store's writes in this process, one at a time: for libsql on a local file. libsql
 * answers through promises but runs each statement synchronously on one of its pooled
 * connections; two of them contending in one process would either wait in SQLite's busy handler,
 * blocking the event loop while the other's transaction waits for it to turn, or fail with
 * SQLITE_BUSY, and a statement libsql fails that way stays in progress until it is garbage
 * collected, holding the lock on its connection (tursodatabase/libsql-client-ts#352). Other
 * processes are waited for by the connection's busy timeout (`openDatabase` sets one). Reads are
 * not queued: WAL readers never wait.
 */
function writeQueue() {
  let tail: Promise<unknown> = Promise.resolve();
  return <T>(run: () => Promise<T>): Promise<T> => {
    const result = tail.then(run);
    tail = result.then(
      () => undefined,
      () => undefined,
    );
    return result;
  };
}

/** The store's statements; each one retried for up to `busyRetryMs` while another connection holds the write lock. */
export function sqliteStatements(sqlite: SqliteDatabase, tables: SqliteTables, busyRetryMs: number): StoreStatements {
  const db: AnySQLiteDatabase = sqlite.db;
  const { keys, history } = tables;
  const archivedBefore = (archivedAt: SQL | typeof keys.archivedAt) =>
    sql`${archivedAt} < ${clock.before(sql`${param('olderThanMs')}`)}`;

  /** A statement, run again while SQLite answers `SQLITE_BUSY` (a busy statement did nothing). */
  const read = <T>(run: () => T | Promise<T>): Promise<T> => whileBusy(run, busyRetryMs);
  const queued = sqlite.transactions === 'asynchronous' ? writeQueue() : undefined;
  /** A write: retried while busy, and on libsql queued behind the process's other writes. */
  const write = <T>(run: () => T | Promise<T>): Promise<T> => (queued ? queued(() => read(run)) : read(run));

  // Built on `db` and prepared once, or on a transaction's handle (prepared there: libsql runs a
  // transaction on a connection of its own).
  const insertClaimOn = (on: AnySQLiteDatabase) =>
    on
      .insert(keys)
      .values({ scope: b.scope, key: b.key, generation: sql`1`, ...freshClaim(clock, b) })
      .onConflictDoNothing({ target: [keys.scope, keys.key] })
      .returning();
  const completeOn = (on: AnySQLiteDatabase) =>
    on.update(keys).set(completion(clock, keys)).where(ownedClaim(keys, b)).returning({ token: keys.token });
  // Rule 2's two writes, each guarded by the generation the claimant saw still being expired:
  // inside `BEGIN IMMEDIATE` no one writes in between, so both apply or neither does.
  const archiveIntoHistoryOn = <K extends 'sync' | 'async'>(on: SqliteOf<K>, generation: number) =>
    on
      .insert(history)
      .select(
        on
          .select(historyCopy(getTableColumns(keys), clock))
          .from(keys)
          .where(stillExpired(clock, keys, b, generation))
          .getSQL(),
      )
      .returning();
  const nextGenerationOn = <K extends 'sync' | 'async'>(on: SqliteOf<K>, generation: number) =>
    on
      .update(keys)
      .set({ ...freshClaim(clock, b), generation: sql`${keys.generation} + 1` })
      .where(stillExpired(clock, keys, b, generation))
      .returning();

  // Taken as arrays (`values()`) and mapped by position, as the hot read below: stepped to
  // SQLITE_DONE, which lets the WAL auto-checkpoint run (`get()` resets a statement at its first row).
  const insertClaim = insertClaimOn(db).prepare();
  // The hot read of the replay path, taken as arrays and mapped by position (drizzle-seams.ts).
  const liveSelection = { ...getTableColumns(keys), now: sql`${clock.now}`.mapWith(keys.createdAt) };
  assertLiveReadOrder(liveSelection);
  const readLive = db.select(liveSelection).from(keys).where(thisKey(keys, b)).prepare();
  const liveRead = (rows: ArrayLike<unknown>[]): LiveRead | undefined =>
    rows[0] ? { row: liveRowOfValues(rows[0]), now: nowOfValues(rows[0]) } : undefined;

  const reclaimReleased = db
    .update(keys)
    .set(freshClaim(clock, b))
    .where(stillReleased(clock, keys, b))
    .returning()
    .prepare();

  const takeOverStale = db
    .update(keys)
    .set(takeover(clock, b, keys.takeovers))
    .where(stillStale(clock, keys, b))
    .returning()
    .prepare();

  const complete = completeOn(db).prepare();

  const release = db
    .update(keys)
    .set({ state: sql`'released'` })
    .where(ownedClaim(keys, b))
    .returning({ token: keys.token })
    .prepare();

  const getLive = db.select().from(keys).where(thisKey(keys, b)).prepare();

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

  const insertClaimRow = (request: ClaimRequest) =>
    write(async () => {
      const [inserted] = await insertClaim.values(claimParameters(request));
      return inserted && liveRowOfValues(inserted);
    });

  /** Rule 2's writes in one `BEGIN IMMEDIATE` transaction: one synchronous call on better-sqlite3, awaited on libsql. */
  const reuseExpired = (request: ClaimRequest, seen: LiveRow) => {
    const parameters = claimParameters(request, seen.token);
    const immediate = { behavior: 'immediate' } as const;
    if (sqlite.transactions === 'synchronous')
      return sqlite.db.transaction(
        (tx) => ({
          archived: archiveIntoHistoryOn(tx, seen.generation).get(parameters),
          record: nextGenerationOn(tx, seen.generation).get(parameters),
        }),
        immediate,
      );
    return sqlite.db.transaction(
      async (tx) => ({
        archived: await archiveIntoHistoryOn(tx, seen.generation).get(parameters),
        record: await nextGenerationOn(tx, seen.generation).get(parameters),
      }),
      immediate,
    );
  };

  /** Atomic mode's statements inside the libsql transaction `tx`, the write lock held since `BEGIN IMMEDIATE`. */
  const within = (tx: AsyncSQLiteTransaction): StoreTransaction => ({
    async insertClaim(request) {
      const [row] = await insertClaimOn(tx).prepare().all(claimParameters(request));
      // The write lock, held since BEGIN IMMEDIATE, serializes claimants: never `inProgress`.
      return row ? { outcome: 'claimed', record: toRecord(row) } : { outcome: 'exists' };
    },
    async lockOwned(owner) {
      const [row] = await tx
        .select()
        .from(keys)
        .where(ownedClaim(keys, b))
        .all({ ...owner });
      return row ? toRecord(row) : null;
    },
    async complete({ scope, key, token, outcome }) {
      return (
        (
          await completeOn(tx)
            .prepare()
            .all({ scope, key, token, ...outcomeParameters(outcome) })
        ).length === 1
      );
    },
    savepoint: savepointOn(tx),
  });

  /**
   * libsql: atomic mode's transaction, in the process's write turn. `BEGIN IMMEDIATE` finding the
   * lock taken is retried as any statement is, but never once the work has begun.
   */
  const transaction: StoreStatements['transaction'] =
    sqlite.transactions === 'asynchronous' && queued
      ? (work) =>
          queued(() => {
            let started = false;
            const attempt = () =>
              transactionEndingAs(
                (body: (tx: AsyncSQLiteTransaction) => Promise<void>) =>
                  sqlite.db.transaction(body, { behavior: 'immediate' }),
                (tx) => {
                  started = true;
                  return work(within(tx));
                },
              );
            return whileBusy(attempt, busyRetryMs, (error) => !started && isSqliteBusy(error));
          })
      : undefined;

  return {
    transaction,
    insertClaim: insertClaimRow,
    // Read first: a replay is this one SELECT; a new key adds a miss of a few µs to a claim of
    // ≈80 µs (two WAL writes). The loop in the store settles an insert that lost to another process.
    async claimOrRead(request) {
      const live = liveRead(await read(() => readLive.values({ scope: request.scope, key: request.key })));
      if (live) return { live };
      const inserted = await insertClaimRow(request);
      return inserted && { inserted };
    },
    readLive: async (scope, key) => liveRead(await read(() => readLive.values({ scope, key }))),
    reclaimReleased: (request, releasedToken) =>
      write(async () => (await reclaimReleased.all(claimParameters(request, releasedToken)))[0]),
    takeOverStale: (request, staleToken) =>
      write(async () => (await takeOverStale.all(claimParameters(request, staleToken)))[0]),
    async reuseExpired(request, seen) {
      const { archived, record } = await write(() => reuseExpired(request, seen));
      return archived && record ? { archived, record } : undefined;
    },
    complete: ({ scope, key, token, outcome }) =>
      write(async () => (await complete.all({ scope, key, token, ...outcomeParameters(outcome) })).length === 1),
    release: ({ scope, key, token }) => write(async () => (await release.all({ scope, key, token })).length === 1),
    getLive: (scope, key) => read(() => getLive.get({ scope, key })),
    history: (scope, key) => read(() => historyOf.all({ scope, key })),
    sweep: (limit) => write(async () => (await sweep.all({ limit })).length),
    purgeLive: (olderThanMs, limit) => write(async () => (await purgeLive.all({ olderThanMs, limit })).length),
    purgeHistory: (olderThanMs, limit) => write(async () => (await purgeHistory.all({ olderThanMs, limit })).length),
    async ping() {
      await read(() => db.get(sql`SELECT 1`));
    },
  };
}
