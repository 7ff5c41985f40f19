/**
 * The SQLite statements, prepared once per store, for a synchronous driver (better-sqlite3) and
 * an asynchronous one (libsql) alike. SQLite has a single writer, so each statement is atomic on
 * its own; the reuse of an expired key is two guarded statements in one `BEGIN IMMEDIATE`
 * transaction. Group commit: on better-sqlite3 a group is the single statements in one
 * `BEGIN IMMEDIATE` transaction, on libsql multi-row statements, each its own transaction.
 * Atomic mode runs on libsql, whose transaction holds a connection of its own and may await;
 * better-sqlite3's transaction is one synchronous call that cannot span the handler's `await`s,
 * so the store has no atomic mode there. A statement that finds the database locked by
 * another connection is retried without blocking the event loop (`busy.ts`). The group forms
 * are in `groups.ts`.
 */
import type { ClaimRequest, StoreTransaction } from '@idem/core/store';
import { and, getTableColumns, sql, type Placeholder, type SQL } from 'drizzle-orm';
import { savepointsOn, transactionEndingAs } from '../atomic-transaction.js';
import { sqliteClock as clock } from '../database-clock.js';
import type {
  AnySQLiteDatabase,
  AsyncSQLiteDatabase,
  SQLiteDatabaseOf as SqliteOf,
  SqliteDatabase,
} from '../dialect.js';
import { liveRowOfValues } from '../drizzle-seams.js';
import { toRecord, type LiveRow } from '../record-rows.js';
import * as writes from '../row-writes.js';
import { openTransaction, type TransactionOf } from '../owned-transaction.js';
import { renewByLease, renewedLease } from '../renewals.js';
import { saveStepByCompareAndSet, sqliteStepNames } from '../steps.js';
import { sameGeneration, waitsAdded } from '../wait-counts.js';
import type { StoreStatements } from '../store-statements.js';
import { isSqliteBusy, whileBusy } from './busy.js';
import { sqliteGroups, valuesOf } from './groups.js';
import { liveReadOf as liveRead, liveSelectionOf } from './rows.js';
import type { SqliteTables } from './schema.js';

const param = sql.placeholder;
const b = writes.claimPlaceholders;

/** The transaction libsql's transactions hand their callback. */
type AsyncSQLiteTransaction = TransactionOf<AsyncSQLiteDatabase>;

/** The sweeper's candidates: expired live rows, read through the partial expiry index (R3). */
export function sqliteSweepCandidates(db: AnySQLiteDatabase, { keys }: SqliteTables, limit: number | Placeholder) {
  const expired = writes.expiredLive(clock, keys);
  return db.select(writes.primaryKeyOf(keys)).from(keys).where(expired).orderBy(keys.expiresAt).limit(limit);
}

/**
 * A queue of the store's writes in this process, one at a time: for every libsql client, a local
 * file and a remote `libsql://` database alike. On a local file libsql answers through promises
 * but runs each statement synchronously on one of its pooled connections; two of them contending
 * in one process would either wait in SQLite's busy handler, blocking the event loop while the
 * other's transaction waits for it to turn, or fail with SQLITE_BUSY, and a statement libsql
 * fails that way stays in progress until it is garbage collected, holding the lock on its
 * connection (tursodatabase/libsql-client-ts#352). A remote database has one writer too, so the
 * queue costs it nothing the server would not impose. Other processes are waited for by the
 * connection's busy timeout (`openDatabase` sets one). Reads are not queued: WAL readers never wait.
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
  const stepNames = sqliteStepNames(keys.steps);
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
      .values({ scope: b.scope, key: b.key, generation: sql`1`, ...writes.freshClaim(clock, b) })
      .onConflictDoNothing({ target: [keys.scope, keys.key] })
      .returning();
  const completeOn = (on: AnySQLiteDatabase) =>
    on
      .update(keys)
      .set(writes.completion(clock, keys))
      .where(writes.ownedClaim(keys, b))
      .returning({ token: keys.token });
  // Rule 2's two writes, each guarded by the generation the claimant saw still being expired:
  // inside `BEGIN IMMEDIATE` no one writes in between, so both apply or neither does.
  const archiveIntoHistoryOn = <K extends 'sync' | 'async'>(on: SqliteOf<K>, generation: number) =>
    on
      .insert(history)
      .select(
        on
          .select(writes.historyCopy(getTableColumns(keys), clock, stepNames))
          .from(keys)
          .where(writes.stillExpired(clock, keys, b, generation))
          .getSQL(),
      )
      .returning();
  const nextGenerationOn = <K extends 'sync' | 'async'>(on: SqliteOf<K>, generation: number) =>
    on
      .update(keys)
      .set({ ...writes.freshClaim(clock, b), generation: sql`${keys.generation} + 1` })
      .where(writes.stillExpired(clock, keys, b, generation))
      .returning();

  // Taken as arrays (`values()`) and mapped by position, as the hot read below (`rows.ts`).
  const insertClaim = insertClaimOn(db).prepare();
  // The hot read of the replay path.
  const readLive = db.select(liveSelectionOf(keys)).from(keys).where(writes.thisKey(keys, b)).prepare();

  const reclaimReleased = db
    .update(keys)
    .set(writes.freshClaim(clock, b))
    .where(writes.stillReleased(clock, keys, b))
    .returning()
    .prepare();

  const takeOverStale = db
    .update(keys)
    .set(writes.takeover(clock, b, keys))
    .where(writes.stillStale(clock, keys, b))
    .returning()
    .prepare();

  const resumeResumable = db
    .update(keys)
    .set(writes.resumption(clock, b, keys))
    .where(writes.stillResumable(clock, keys, b))
    .returning()
    .prepare();

  // E8: a step is a compare-and-set on the owner's steps (`steps.ts`), on `db` or a transaction.
  const readStepsOn = (on: AnySQLiteDatabase) =>
    on.select({ steps: keys.steps }).from(keys).where(writes.ownedClaim(keys, b));
  const writeStepsOn = (on: AnySQLiteDatabase) =>
    on
      .update(keys)
      .set({ steps: sql`${param('to')}` })
      .where(and(writes.ownedClaim(keys, b), sql`${keys.steps} = ${param('from')}`))
      .returning({ token: keys.token });
  const readSteps = readStepsOn(db).prepare();
  const writeSteps = writeStepsOn(db).prepare();

  const complete = completeOn(db).prepare();

  const release = db
    .update(keys)
    .set({ state: sql`'released'` })
    .where(writes.ownedClaim(keys, b))
    .returning({ token: keys.token })
    .prepare();

  const renew = db
    .update(keys)
    .set(renewedLease(clock, sql`${param('leaseMs')}`))
    .where(writes.ownedClaim(keys, b))
    .returning({ token: keys.token })
    .prepare();

  const addWaits = db
    .update(keys)
    .set(waitsAdded(keys, sql`${param('count')}`))
    .where(sameGeneration(keys, { scope: b.scope, key: b.key, generation: sql`${param('generation')}` }))
    .returning({ token: keys.token })
    .prepare();

  const getLive = db.select().from(keys).where(writes.thisKey(keys, b)).prepare();

  const historyOf = db.select().from(history).where(writes.thisKey(history, b)).orderBy(history.generation).prepare();

  const sweep = db
    .update(keys)
    .set(writes.archiving(clock, stepNames))
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
      const [inserted] = await insertClaim.values(writes.claimParameters(request));
      return inserted && liveRowOfValues(inserted);
    });

  /** Rule 2's writes in one `BEGIN IMMEDIATE` transaction: one synchronous call on better-sqlite3, awaited on libsql. */
  const reuseExpired = (request: ClaimRequest, seen: LiveRow) => {
    const parameters = writes.claimParameters(request, seen.token);
    const immediate = { behavior: 'immediate' } as const;
    if (sqlite.transactions === 'synchronous')
      return openTransaction(
        sqlite.db,
        (tx) => ({
          archived: archiveIntoHistoryOn(tx, seen.generation).get(parameters),
          record: nextGenerationOn(tx, seen.generation).get(parameters),
        }),
        immediate,
      );
    return openTransaction(
      sqlite.db,
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
      const [row] = await insertClaimOn(tx).prepare().all(writes.claimParameters(request));
      // The write lock, held since BEGIN IMMEDIATE, serializes claimants: never `inProgress`.
      return row ? { outcome: 'claimed', record: toRecord(row) } : { outcome: 'exists' };
    },
    async lockOwned(owner) {
      const [row] = await tx
        .select()
        .from(keys)
        .where(writes.ownedClaim(keys, b))
        .all({ ...owner });
      return row ? toRecord(row) : null;
    },
    async complete({ scope, key, token, outcome, resumable }) {
      return (
        (
          await completeOn(tx)
            .prepare()
            .all({ scope, key, token, ...writes.outcomeParameters(outcome, resumable) })
        ).length === 1
      );
    },
    saveStep: ({ name, result, ...owner }) =>
      saveStepByCompareAndSet(
        { scope: owner.scope, key: owner.key, token: owner.token },
        { name, result },
        async (o) => (await readStepsOn(tx).prepare().all(o))[0]?.steps,
        async (o, from, to) =>
          (
            await writeStepsOn(tx)
              .prepare()
              .all({ ...o, from, to })
          ).length === 1,
      ),
    ...savepointsOn(tx),
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
                  openTransaction(sqlite.db, body, { behavior: 'immediate' }),
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
    ...sqliteGroups({ sqlite, tables, busyRetryMs, read, write }),
    insertClaim: insertClaimRow,
    // Read first: a replay is this one SELECT; a new key adds a miss to a claim of two WAL writes
    // (bench/README.md). The loop in the store settles an insert that lost to another process.
    async claimOrRead(request) {
      const live = liveRead(await read(() => readLive.values({ scope: request.scope, key: request.key })));
      if (live) return { live };
      const inserted = await insertClaimRow(request);
      return inserted && { inserted };
    },
    readLive: async (scope, key) => liveRead(await read(() => readLive.values({ scope, key }))),
    reclaimReleased: (request, releasedToken) =>
      write(async () => (await reclaimReleased.all(writes.claimParameters(request, releasedToken)))[0]),
    takeOverStale: (request, staleToken) =>
      write(async () => (await takeOverStale.all(writes.claimParameters(request, staleToken)))[0]),
    resumeResumable: (request, resumableToken) =>
      write(async () => (await resumeResumable.all(writes.claimParameters(request, resumableToken)))[0]),
    saveStep: ({ name, result, ...owner }) =>
      saveStepByCompareAndSet(
        { scope: owner.scope, key: owner.key, token: owner.token },
        { name, result },
        async (o) => (await read(() => readSteps.all(o)))[0]?.steps,
        async (o, from, to) => write(async () => (await writeSteps.all({ ...o, from, to })).length === 1),
      ),
    async reuseExpired(request, seen) {
      const { archived, record } = await write(() => reuseExpired(request, seen));
      return archived && record ? { archived, record } : undefined;
    },
    complete: ({ scope, key, token, outcome, resumable }) =>
      write(
        async () =>
          (await complete.all({ scope, key, token, ...writes.outcomeParameters(outcome, resumable) })).length === 1,
      ),
    release: ({ scope, key, token }) => write(async () => (await release.all({ scope, key, token })).length === 1),
    renew: ({ scope, key, token, leaseMs }) =>
      write(async () => (await renew.all({ scope, key, token, leaseMs })).length === 1),
    renewMany: (renewals) =>
      renewByLease(renewals, (leaseMs, owners) => {
        const update = db
          .update(keys)
          .set(renewedLease(clock, sql`${leaseMs}`))
          .where(writes.ownedClaims(keys, owners, valuesOf))
          .returning({ scope: keys.scope, key: keys.key, token: keys.token });
        return write(async () => await update.all());
      }),
    addWaits: ({ scope, key, generation }, count) =>
      write(async () => (await addWaits.all({ scope, key, generation, count })).length === 1),
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
