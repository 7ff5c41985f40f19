/**
 * The SQLite statements, prepared once per store. SQLite has a single writer, so each
 * statement is atomic on its own; the reuse of an expired key runs in a synchronous
 * `BEGIN IMMEDIATE` transaction (a better-sqlite3 transaction must not contain an `await`).
 * Atomic mode runs the same prepared statements inside such a transaction, around a handler that
 * must be synchronous too. A statement that finds the database locked by another connection is
 * retried without blocking the event loop (`sqlite-busy.ts`).
 */
import type { ClaimRequest } from '@idem/core/store';
import { and, eq, getTableColumns, sql, type Placeholder, type SQL } from 'drizzle-orm';
import { sqliteClock as clock } from './database-clock.js';
import type { SyncSQLiteDatabase } from './dialect.js';
import { isThenable, type Eventually } from './eventually.js';
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

const SYNCHRONOUS_HANDLER_REQUIRED = '[idem] atomic mode on SQLite needs a synchronous handler: better-sqlite3 transactions cannot span an await';

const param = sql.placeholder;

/** The sweeper's candidates: expired live rows, read through the partial expiry index (R3). */
export function sqliteSweepCandidates(db: SyncSQLiteDatabase, { keys }: SqliteTables, limit: number | Placeholder) {
  return db
    .select({ scope: keys.scope, key: keys.key })
    .from(keys)
    .where(and(sql`${keys.state} <> 'archived'`, expiredAt(clock, keys)))
    .orderBy(keys.expiresAt)
    .limit(limit);
}

/** The columns of the hot read, in the order `liveRowOf` takes them. */
const LIVE_READ_ORDER = [
  'scope', 'key', 'generation', 'fingerprint', 'state', 'token', 'createdAt', 'leaseUntil', 'expiresAt',
  'completedAt', 'archivedAt', 'takeovers', 'outcomeKind', 'outcomeStatus', 'body', 'now',
] as const;

/** A live row from the hot read's values (SQLite keeps timestamps as integer epoch milliseconds). */
function liveRowOf(v: unknown[]): LiveRow {
  return {
    scope: v[0] as string,
    key: v[1] as string,
    generation: v[2] as number,
    fingerprint: v[3] as string | null,
    state: v[4] as LiveRow['state'],
    token: v[5] as string,
    createdAt: new Date(v[6] as number),
    leaseUntil: new Date(v[7] as number),
    expiresAt: new Date(v[8] as number),
    completedAt: v[9] === null ? null : new Date(v[9] as number),
    archivedAt: v[10] === null ? null : new Date(v[10] as number),
    takeovers: v[11] as number,
    outcomeKind: v[12] as LiveRow['outcomeKind'],
    outcomeStatus: v[13] as number | null,
    body: v[14] as string | null,
  };
}

/** The store's statements over `db`; each one retried for up to `busyRetryMs` while another connection holds the write lock. */
export function sqliteStatements(db: SyncSQLiteDatabase, tables: SqliteTables, busyRetryMs: number): StoreStatements {
  return withBusyRetry(statementsOf(db, tables), busyRetryMs);
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
    wrapped[name] = (...args: unknown[]) => whileBusy(() => (value as (...a: unknown[]) => unknown).apply(statements, args), timeoutMs);
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

function statementsOf(db: SyncSQLiteDatabase, tables: SqliteTables): StoreStatements {
  const { keys, history } = tables;
  const thisKey = and(eq(keys.scope, b.scope), eq(keys.key, b.key));
  const ownedBy = (token: SQL) => eq(keys.token, token);
  const archivedBefore = (archivedAt: SQL | typeof keys.archivedAt) => sql`${archivedAt} < ${clock.before(sql`${param('olderThanMs')}`)}`;

  const insertClaim = db
    .insert(keys)
    .values({ scope: b.scope, key: b.key, generation: sql`1`, ...freshClaim(clock, b) })
    .onConflictDoNothing({ target: [keys.scope, keys.key] })
    .returning()
    .prepare();
  // Arrays too (`values()` steps the insert to SQLITE_DONE, which lets the WAL auto-checkpoint run).
  const insertClaimRow = (request: ClaimRequest): LiveRow | undefined => {
    const values = insertClaim.values(claimParameters(request))[0] as unknown[] | undefined;
    return values && liveRowOf(values);
  };

  // The hot read of the replay path, taken as arrays (`values()`, logged like any drizzle query)
  // and mapped by position into one fixed shape: drizzle's generic row mapping costs more than
  // the statement itself here (≈1 µs of ≈5).
  const liveSelection = { ...getTableColumns(keys), now: sql`${clock.now}`.mapWith(keys.createdAt) };
  if (Object.keys(liveSelection).join() !== LIVE_READ_ORDER.join()) throw new Error('[idem] the SQLite live table changed: update LIVE_READ_ORDER and liveRowOf');
  const readLive = db.select(liveSelection).from(keys).where(thisKey).prepare();
  const readLiveRow = (scope: string, key: string): { row: LiveRow; now: Date } | undefined => {
    const values = readLive.values({ scope, key })[0] as unknown[] | undefined;
    return values && { row: liveRowOf(values), now: new Date(values[15] as number) };
  };

  const reclaimReleased = db
    .update(keys)
    .set(freshClaim(clock, b))
    .where(and(thisKey, ownedBy(b.previousToken), sql`${keys.state} = 'released'`, sql`${keys.expiresAt} > ${clock.now}`))
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

  const archiveIntoHistory = db
    .insert(history)
    .select(db.select(historyCopy(getTableColumns(keys), clock)).from(keys).where(thisKey))
    .returning()
    .prepare();

  const nextGeneration = db
    .update(keys)
    .set({ ...freshClaim(clock, b), generation: sql`${keys.generation} + 1` })
    .where(and(thisKey, ownedBy(b.previousToken)))
    .returning()
    .prepare();

  const complete = db
    .update(keys)
    .set(completion(clock, keys))
    .where(and(thisKey, ownedBy(b.token), sql`${keys.state} = 'processing'`))
    .returning({ token: keys.token })
    .prepare();

  const release = db
    .update(keys)
    .set({ state: sql`'released'` })
    .where(and(thisKey, ownedBy(b.token), sql`${keys.state} = 'processing'`))
    .returning({ token: keys.token })
    .prepare();

  const getLive = db.select().from(keys).where(thisKey).prepare();

  const readOwned = db
    .select()
    .from(keys)
    .where(and(thisKey, ownedBy(b.token), sql`${keys.state} = 'processing'`))
    .prepare();

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

  /**
   * Atomic mode's statements inside the transaction `tx`: the prepared statements themselves
   * (one connection), the write lock held since `BEGIN IMMEDIATE`.
   */
  const within = (tx: SyncSQLiteDatabase): TransactionStatements => ({
    insertClaim: insertClaimRow,
    lockOwned: (owner) => readOwned.get(owner) as LiveRow | undefined,
    complete: ({ scope, key, token, outcome }) => complete.all({ scope, key, token, ...outcomeParameters(outcome) }).length === 1,
    savepoint(run) {
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
        return { ok: true, value };
      } catch (error) {
        if (error === refusal) throw error;
        return { ok: false, error };
      }
    },
  });

  return {
    atomicHandlers: 'synchronous',
    async transaction(work) {
      return db.transaction(
        (tx) => {
          const done = work(within(tx));
          if (isThenable(done)) throw new TypeError('[idem] a SQLite transaction cannot wait for a promise');
          return done;
        },
        { behavior: 'immediate' },
      );
    },
    async insertClaim(request) {
      return insertClaimRow(request);
    },
    // Read first: a replay is this one SELECT; a new key adds a miss of a few µs to a claim of
    // ≈80 µs (two WAL writes). The loop in the store settles an insert that lost to another process.
    claimOrRead(request) {
      const live = readLiveRow(request.scope, request.key);
      if (live) return { live };
      const inserted = insertClaimRow(request);
      return inserted && { inserted };
    },
    async readLive(scope, key) {
      return readLiveRow(scope, key);
    },
    async reclaimReleased(request, releasedToken) {
      return reclaimReleased.get(claimParameters(request, releasedToken)) as LiveRow | undefined;
    },
    async takeOverStale(request, staleToken) {
      return takeOverStale.get(claimParameters(request, staleToken)) as LiveRow | undefined;
    },
    async reuseExpired(request, seen) {
      const parameters = claimParameters(request, seen.token);
      return db.transaction(
        () => {
          const locked = readLiveRow(request.scope, request.key);
          if (!locked || !isStillExpiredGeneration(locked.row, seen, locked.now)) return undefined;
          const archived = archiveIntoHistory.get(parameters) as HistoryRow;
          const record = nextGeneration.get(parameters) as LiveRow;
          return { record, archived };
        },
        { behavior: 'immediate' },
      );
    },
    async complete({ scope, key, token, outcome }) {
      return complete.all({ scope, key, token, ...outcomeParameters(outcome) }).length === 1;
    },
    async release({ scope, key, token }) {
      return release.all({ scope, key, token }).length === 1;
    },
    async getLive(scope, key) {
      return getLive.get({ scope, key }) as LiveRow | undefined;
    },
    async history(scope, key) {
      return historyOf.all({ scope, key }) as HistoryRow[];
    },
    async sweep(limit) {
      return sweep.all({ limit }).length;
    },
    async purgeLive(olderThanMs, limit) {
      return purgeLive.all({ olderThanMs, limit }).length;
    },
    async purgeHistory(olderThanMs, limit) {
      return purgeHistory.all({ olderThanMs, limit }).length;
    },
    async ping() {
      db.get(sql`SELECT 1`);
    },
  };
}
