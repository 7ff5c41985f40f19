/**
 * The SQLite statements, prepared once per store, for a synchronous driver (better-sqlite3) and
 * an asynchronous one (libsql) alike. SQLite has a single writer, so each statement is atomic on
 * its own; the reuse of an expired key is two guarded statements in one `BEGIN IMMEDIATE`
 * transaction. Group commit: on better-sqlite3 a group is the single statements in one
 * `BEGIN IMMEDIATE` transaction, on libsql multi-row statements, each its own transaction.
 * Atomic mode runs on libsql, whose transaction holds a connection of its own and may await;
 * better-sqlite3's transaction is one synchronous call that cannot span the handler's `await`s,
 * so the store has no atomic mode there. A statement that finds the database locked by
 * another connection is retried without blocking the event loop (`sqlite-busy.ts`).
 */
import type { ClaimOwner, ClaimRequest, StoredOutcome, StoreTransaction } from '@idem/core/store';
import { and, eq, getTableColumns, sql, type Placeholder, type SQL } from 'drizzle-orm';
import { savepointOn, transactionEndingAs } from './atomic-transaction.js';
import { sqliteClock as clock } from './database-clock.js';
import type {
  AnySQLiteDatabase,
  AsyncSQLiteDatabase,
  SQLiteDatabaseOf as SqliteOf,
  SqliteDatabase,
  SyncSQLiteDatabase,
} from './dialect.js';
import { assertLiveReadOrder, liveRowOfValues, nowOfValues } from './drizzle-seams.js';
import { toRecord, type LiveRead, type LiveRow } from './record-rows.js';
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
  ownedClaim,
  stillExpired,
  stillReleased,
  stillStale,
  takeover,
  thisKey,
} from './row-writes.js';
import { openTransaction, type TransactionOf } from './owned-transaction.js';
import type { SqliteTables } from './sqlite-schema.js';
import { isSqliteBusy, whileBusy } from './sqlite-busy.js';
import { ownedClaims, renewByLease, renewedLease } from './renewals.js';
import { sameGeneration, waitsAdded } from './wait-counts.js';
import type { FirstStep, StoreStatements } from './store-statements.js';

const param = sql.placeholder;

/**
 * The most requests one group statement takes. A claim binds 6 values per row, a completion 6:
 * far below the 32,766 bound parameters of the SQLite builds better-sqlite3 and libsql bundle.
 * The batcher's groups are smaller (`group-commit.ts`); a longer one is refused before anything
 * is written, and the batcher then sends its requests one at a time.
 */
export const SQLITE_MAX_GROUP = 2000;

/** One string per (scope, key), for matching a group's rows to its requests. */
const keyOf = (scope: string, key: string): string => `${scope.length}:${scope}${key}`;

/** A group's completions, as the `VALUES` rows `UPDATE … FROM` joins on (`column1` … `column6`). */
type Completion = ClaimOwner & { outcome: StoredOutcome };

/** The transaction libsql's transactions hand their callback. */
type AsyncSQLiteTransaction = TransactionOf<AsyncSQLiteDatabase>;

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

/** Whether a libsql drizzle instance wraps a client of a local file (`@libsql/client`'s `protocol`). */
function isLocalLibsql(db: AsyncSQLiteDatabase): boolean {
  return (db as { $client?: { protocol?: unknown } }).$client?.protocol === 'file';
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

  const renew = db
    .update(keys)
    .set(renewedLease(clock, sql`${param('leaseMs')}`))
    .where(ownedClaim(keys, b))
    .returning({ token: keys.token })
    .prepare();

  const addWaits = db
    .update(keys)
    .set(waitsAdded(keys, sql`${param('count')}`))
    .where(sameGeneration(keys, { scope: b.scope, key: b.key, generation: sql`${param('generation')}` }))
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
                  openTransaction(sqlite.db, body, { behavior: 'immediate' }),
                (tx) => {
                  started = true;
                  return work(within(tx));
                },
              );
            return whileBusy(attempt, busyRetryMs, (error) => !started && isSqliteBusy(error));
          })
      : undefined;

  /** `(VALUES (…), (…))` of a group's rows, each a list of bound values. */
  const valuesOf = (rows: unknown[][]) => sql`(VALUES ${boundTuples(rows)})`;
  const assertGroupFits = (length: number) => {
    if (length > SQLITE_MAX_GROUP)
      throw new RangeError(`[idem] SQLite store: a group of ${length} requests; at most ${SQLITE_MAX_GROUP}`);
  };

  /**
   * better-sqlite3's group commit: the one-request statements, prepared once, run for each
   * request of the group inside one synchronous `BEGIN IMMEDIATE` transaction, so the group
   * costs one commit; each request sees the rows the ones before it wrote (a key twice in the
   * group: the later one reads the first one's claim, as it would one at a time). On a driver
   * that answers synchronously a prepared statement costs a few µs, less than building and
   * preparing one multi-row statement per group. A busy `BEGIN` did nothing and is retried;
   * once the body has begun, a failure rolls the whole group back and is not retried here.
   */
  const synchronousGroups = (on: SyncSQLiteDatabase) => {
    const readLiveOn = on.select(liveSelection).from(keys).where(thisKey(keys, b)).prepare();
    const insertClaimOn = on
      .insert(keys)
      .values({ scope: b.scope, key: b.key, generation: sql`1`, ...freshClaim(clock, b) })
      .onConflictDoNothing({ target: [keys.scope, keys.key] })
      .returning()
      .prepare();
    const completeOnSync = on
      .update(keys)
      .set(completion(clock, keys))
      .where(ownedClaim(keys, b))
      .returning({ token: keys.token })
      .prepare();
    const immediately = <T>(body: () => T): Promise<T> => {
      let started = false;
      return whileBusy(
        () =>
          openTransaction(
            on,
            () => {
              started = true;
              return body();
            },
            { behavior: 'immediate' },
          ),
        busyRetryMs,
        (error) => !started && isSqliteBusy(error),
      );
    };
    return {
      claimOrReadMany: async (requests: ClaimRequest[]) => {
        assertGroupFits(requests.length);
        return immediately(() =>
          requests.map((request): FirstStep | undefined => {
            const live = liveRead(readLiveOn.values({ scope: request.scope, key: request.key }));
            if (live) return { live };
            const [inserted] = insertClaimOn.values(claimParameters(request));
            return inserted && { inserted: liveRowOfValues(inserted) };
          }),
        );
      },
      completeMany: async (completions: Completion[]) => {
        assertGroupFits(completions.length);
        return immediately(() =>
          completions.map(
            ({ scope, key, token, outcome }) =>
              completeOnSync.all({ scope, key, token, ...outcomeParameters(outcome) }).length === 1,
          ),
        );
      },
    };
  };

  /**
   * libsql's group commit: one read of the live rows of the whole group (a WAL reader: no
   * lock, as `claimOrRead`'s read), then one multi-row `INSERT … ON CONFLICT DO NOTHING
   * RETURNING` of the misses. That insert is one statement, hence one transaction on its own:
   * all of the group's claims are written in one commit or none is, and a `SQLITE_BUSY` answer
   * means it did nothing, so it is retried as any write. A key twice in the group: the first
   * request inserts, a later one gets the row the first inserted as its live row (the clock of
   * that statement is the row's `created_at`).
   */
  async function claimOrReadMany(requests: ClaimRequest[]): Promise<Array<FirstStep | undefined>> {
    assertGroupFits(requests.length);
    const liveMany = db
      .select(liveSelection)
      .from(keys)
      .where(sql`(${keys.scope}, ${keys.key}) IN ${valuesOf(requests.map(({ scope, key }) => [scope, key]))}`);
    const found = new Map<string, LiveRead>();
    for (const values of await read(() => liveMany.values())) {
      const live = liveRead([values]);
      if (live) found.set(keyOf(live.row.scope, live.row.key), live);
    }
    const misses = new Map<string, ClaimRequest>();
    const winners = new Set<number>();
    for (const [i, request] of requests.entries()) {
      const id = keyOf(request.scope, request.key);
      if (found.has(id) || misses.has(id)) continue;
      misses.set(id, request);
      winners.add(i);
    }
    const inserted = new Map<string, LiveRow>();
    if (misses.size > 0) {
      const insertMany = db
        .insert(keys)
        .values(
          [...misses.values()].map((request) => {
            const v = claimValues(request, '');
            return { scope: v.scope, key: v.key, generation: sql`1`, ...freshClaim(clock, v) };
          }),
        )
        .onConflictDoNothing({ target: [keys.scope, keys.key] })
        .returning();
      for (const values of await write(() => insertMany.values())) {
        const row = liveRowOfValues(values);
        inserted.set(keyOf(row.scope, row.key), row);
      }
    }
    return requests.map((request, i): FirstStep | undefined => {
      const id = keyOf(request.scope, request.key);
      const live = found.get(id);
      if (live) return { live };
      const row = inserted.get(id);
      if (!row) return undefined;
      return winners.has(i) && row.token === request.token ? { inserted: row } : { live: { row, now: row.createdAt } };
    });
  }

  /**
   * libsql's group completions: one `UPDATE … FROM (VALUES …)`, each row guarded as `complete`
   * (`ownedClaim`: that owner's `processing` claim), one statement and so one commit. `RETURNING`
   * names the owners it completed; the others (a stale token, a claim taken over) answer false.
   */
  async function completeMany(completions: Completion[]): Promise<boolean[]> {
    assertGroupFits(completions.length);
    const v = (column: number) => sql.raw(`"v"."column${column}"`);
    const update = db
      .update(keys)
      .set(completion(clock, keys, { kind: v(4), status: v(5), body: v(6) }))
      .from(
        sql`${valuesOf(
          completions.map(({ scope, key, token, outcome }) => [
            scope,
            key,
            token,
            outcome.kind,
            outcome.status,
            outcome.body,
          ]),
        )} AS "v"`,
      )
      .where(
        and(
          sql`${keys.scope} = ${v(1)}`,
          sql`${keys.key} = ${v(2)}`,
          sql`${keys.token} = ${v(3)}`,
          sql`${keys.state} = 'processing'`,
        ),
      )
      .returning({ scope: keys.scope, key: keys.key, token: keys.token });
    const completed = new Set<string>();
    for (const row of await write(() => update.all())) completed.add(`${keyOf(row.scope, row.key)}\u0000${row.token}`);
    // A completion twice in the group: the first one completed the row, a later one finds it done.
    return completions.map(({ scope, key, token }) => completed.delete(`${keyOf(scope, key)}\u0000${token}`));
  }

  // better-sqlite3 answers synchronously, so nothing is ever in flight: a group is the calls of
  // one tick. libsql on a local file runs each statement synchronously too, behind a promise:
  // grouped by tick as well (its groups by in-flight writes came out smaller and slower). Over the
  // network (`libsql://`, `http(s)://`, `ws(s)://`) a statement is in flight for a round trip.
  const groups =
    sqlite.transactions === 'synchronous'
      ? { ...synchronousGroups(sqlite.db), groupMode: 'tick' as const }
      : {
          claimOrReadMany,
          completeMany,
          groupMode: isLocalLibsql(sqlite.db) ? ('tick' as const) : ('inFlight' as const),
        };

  return {
    transaction,
    ...groups,
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
    renew: ({ scope, key, token, leaseMs }) =>
      write(async () => (await renew.all({ scope, key, token, leaseMs })).length === 1),
    renewMany: (renewals) =>
      renewByLease(renewals, (leaseMs, owners) => {
        const update = db
          .update(keys)
          .set(renewedLease(clock, sql`${leaseMs}`))
          .where(ownedClaims(keys, owners, valuesOf))
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
