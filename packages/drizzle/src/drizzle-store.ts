/**
 * `createDrizzleStore`: the store contract over drizzle, for SQLite, PostgreSQL and MySQL. The rules
 * of `claim` and the steps of atomic mode are written here, once, over the dialect's statements.
 */
import {
  fingerprintsMatch,
  type AtomicMode,
  type AtomicResult,
  type ClaimRequest,
  type ClaimResult,
  type IdempotencyRecord,
  type IdempotencyStore,
  type StoredOutcome,
} from '@idem/core/store';
import { detectDialect, type Dialect, type DrizzleDatabase } from './dialect.js';
import { chain, isThenable, type Eventually } from './eventually.js';
import { defineMysqlTables } from './mysql-schema.js';
import { mysqlStatements } from './mysql-store.js';
import { definePgTables } from './pg-schema.js';
import { pgStatements } from './pg-store.js';
import { isExpired, toRecord, toTimeline, type LiveRow } from './record-rows.js';
import { defineSqliteTables } from './sqlite-schema.js';
import { DEFAULT_BUSY_RETRY_MS } from './sqlite-busy.js';
import { sqliteStatements } from './sqlite-store.js';
import {
  CLAIM_IN_PROGRESS,
  type FirstStep,
  type StoreStatements,
  type TransactionStatements,
} from './store-statements.js';
import { resolveTableNames, type TableNames, type TableOptions } from './table-names.js';
import { withoutQueryParameters } from './query-errors.js';

export interface DrizzleStoreOptions {
  /**
   * Names of the live and history tables, or a prefix for them (`{ prefix: 'project_' }` for
   * `project_idem_keys` and `project_idem_key_history`, e.g. for drizzle-kit's `tablesFilter`).
   * Defaults to `idem_keys` and `idem_key_history`, the tables `migrate()` creates; with other
   * names, put `definePgTables(options)` / `defineSqliteTables(options)` /
   * `defineMysqlTables(options)` (the same options) in your drizzle schema and let drizzle-kit
   * create them.
   */
  tables?: TableOptions;
  /**
   * SQLite: how long a statement that finds the database locked by another connection (another
   * process writing) is retried — asynchronously, so the event loop keeps serving replays and
   * health checks — before the store rejects and the engine answers 503 with `Retry-After`.
   * Open the connection with `busy_timeout = 0` (`openDatabase` does): better-sqlite3's own
   * busy timeout waits synchronously, blocking the whole process. Ignored on PostgreSQL.
   * Defaults to 5000 ms.
   */
  busyRetryMs?: number;
}

/**
 * An {@link IdempotencyStore} backed by drizzle, with the dialect, driver and table names it
 * uses, and atomic mode: the handler gets the drizzle transaction, typed as `TTx` (PostgreSQL,
 * MySQL and libsql: it may await; better-sqlite3: it must be synchronous).
 */
export interface DrizzleStore<TTx = unknown> extends Omit<IdempotencyStore<TTx>, keyof AtomicMode>, AtomicMode<TTx> {
  readonly dialect: Dialect;
  /** The driver the drizzle instance wraps, as in drizzle's import path (`node-postgres`, `postgres-js`, `pglite`, `better-sqlite3`, `libsql`, `mysql2`). */
  readonly driver: string;
  readonly tables: TableNames;
}

/** How many times a claim re-reads after losing a compare-and-set before it gives up. */
const MAX_CLAIM_ROUNDS = 8;
/** Rows deleted per statement by `purge`, so that no single statement holds locks for long. */
const PURGE_BATCH = 5000;
const DEFAULT_SWEEP_BATCH = 1000;

/** Thrown inside an atomic-mode transaction to roll it back and answer `value`. */
class Rollback<R> {
  constructor(readonly value: R) {}
}

type Handler<T> = (tx: unknown, record: IdempotencyRecord) => T | Promise<T>;
type ToOutcome<T> = (result: AtomicResult<T>) => StoredOutcome;

/** The transaction `db.transaction(…)` hands its callback: what atomic mode's `claim.tx` is. */
export type DrizzleTransaction<TDb extends DrizzleDatabase> = Parameters<Parameters<TDb['transaction']>[0]>[0];

/**
 * Creates the store over a drizzle instance: `drizzle-orm/node-postgres` (a `pg.Pool`),
 * `drizzle-orm/postgres-js` or `drizzle-orm/pglite` (PostgreSQL), `drizzle-orm/better-sqlite3`
 * or `drizzle-orm/libsql` (SQLite), `drizzle-orm/mysql2` (MySQL 8.0+, MariaDB 10.6+). A driver
 * that lacks what the store needs (neon-http and D1 have no usable transactions) is refused
 * with a `TypeError` that says so. Run {@link migrate}
 * once before first use, or create the tables with drizzle-kit.
 */
export function createDrizzleStore<TDb extends DrizzleDatabase>(
  db: TDb,
  { tables: tableOptions = {}, busyRetryMs = DEFAULT_BUSY_RETRY_MS }: DrizzleStoreOptions = {},
): DrizzleStore<DrizzleTransaction<TDb>> {
  const tables = resolveTableNames(tableOptions);
  const detected = detectDialect(db);
  const statements =
    detected.dialect === 'postgres'
      ? pgStatements(detected.db, definePgTables(tables))
      : detected.dialect === 'mysql'
        ? mysqlStatements(detected.db, defineMysqlTables(tables))
        : sqliteStatements(detected.db, defineSqliteTables(tables), detected.driver, busyRetryMs);
  // Every method answers a promise through this wrapper, also those that answer at once inside.
  return withoutQueryParameters(storeOver(statements, detected.dialect, detected.driver.name, tables)) as DrizzleStore<
    DrizzleTransaction<TDb>
  >;
}

function storeOver(s: StoreStatements, dialect: Dialect, driver: string, tables: TableNames): DrizzleStore {
  /**
   * Rule 5 without a write, the common case (a replay, a conflict, a mismatch, an expired key
   * rejected): the answer at once, or undefined when rules 2–4 may change the row.
   */
  function settledWithoutWrite(request: ClaimRequest, row: LiveRow, now: Date): ClaimResult | undefined {
    if (isExpired(row, now))
      return request.expiredReuse === 'reject'
        ? { outcome: 'existing', record: toRecord(row), now, expired: true }
        : undefined;
    if (row.state === 'released') return undefined;
    if (
      row.state === 'processing' &&
      row.leaseUntil.getTime() <= now.getTime() &&
      fingerprintsMatch(row.fingerprint, request.fingerprint)
    )
      return undefined;
    return { outcome: 'existing', record: toRecord(row), now, expired: false };
  }

  /** Rules 2–5 of the contract for a live row read at `now`; undefined when a compare-and-set lost. */
  async function settle(request: ClaimRequest, row: LiveRow, now: Date): Promise<ClaimResult | undefined> {
    const settled = settledWithoutWrite(request, row, now);
    if (settled) return settled;
    if (isExpired(row, now)) {
      const reused = await s.reuseExpired(request, row);
      return reused && { outcome: 'claimed', record: toRecord(reused.record), expired: toRecord(reused.archived) };
    }
    if (row.state === 'released') {
      const record = await s.reclaimReleased(request, row.token);
      return record && { outcome: 'claimed', record: toRecord(record) };
    }
    const record = await s.takeOverStale(request, row.token);
    return (
      record && {
        outcome: 'claimed',
        record: toRecord(record),
        takeover: { previousToken: row.token, previousLeaseUntil: row.leaseUntil },
      }
    );
  }

  /** After the first step: claimed, answered, or the loop of {@link settleContended}. */
  function afterFirstStep(request: ClaimRequest, first: FirstStep): Eventually<ClaimResult> {
    if (first && 'inserted' in first) return { outcome: 'claimed', record: toRecord(first.inserted) };
    if (first)
      return settledWithoutWrite(request, first.live.row, first.live.now) ?? settleContended(request, first.live);
    return settleContended(request, undefined);
  }

  /**
   * The rest: a write of rules 2–4 on the row seen first, then, while a compare-and-set or an
   * insert loses to a concurrent claimant (or the row is purged in between), read and try again.
   */
  async function settleContended(
    request: ClaimRequest,
    seen: { row: LiveRow; now: Date } | undefined,
  ): Promise<ClaimResult> {
    if (seen) {
      const result = await settle(request, seen.row, seen.now);
      if (result) return result;
    }
    let mayBeNew = false;
    for (let round = 0; round < MAX_CLAIM_ROUNDS; round++) {
      if (mayBeNew) {
        const inserted = await s.insertClaim(request);
        if (inserted) return { outcome: 'claimed', record: toRecord(inserted) };
      }
      const live = await s.readLive(request.scope, request.key);
      // Purged between the insert and the read: the key is new again.
      mayBeNew = live === undefined;
      if (!live) continue;
      const result = await settle(request, live.row, live.now);
      if (result) return result;
    }
    throw new Error(`[idem] claim did not settle after ${MAX_CLAIM_ROUNDS} rounds of contention on one key`);
  }

  /** One transaction: committed with what `work` returns, rolled back when it throws (a {@link Rollback} answers its value). */
  async function inTransaction<R>(work: (t: TransactionStatements) => Eventually<R>): Promise<R> {
    try {
      return await s.transaction(work);
    } catch (error) {
      if (error instanceof Rollback) return error.value as R;
      throw error;
    }
  }

  /**
   * The handler on a savepoint, then its outcome stored if `record.token` still owns the claim;
   * when it does not, everything is rolled back and `fenced` answered.
   */
  function runAndComplete<T, F>(
    t: TransactionStatements,
    record: IdempotencyRecord,
    run: Handler<T>,
    toOutcome: ToOutcome<T>,
    fenced: F,
  ): Eventually<AtomicResult<T>> {
    const { scope, key, token } = record;
    return chain(
      t.savepoint((tx) => run(tx, record)),
      (result) =>
        chain(t.complete({ scope, key, token, outcome: toOutcome(result) }), (owned) => {
          if (!owned) throw new Rollback(fenced);
          return result;
        }),
    );
  }

  return {
    dialect,
    driver,
    tables,

    // Not `async`: on SQLite a replay is one synchronous read, and each promise layer would be
    // a measurable share of it. `withoutQueryParameters` below hands the caller a promise.
    claim(request) {
      const first = s.claimOrRead(request);
      return (
        isThenable(first) ? first.then((step) => afterFirstStep(request, step)) : afterFirstStep(request, first)
      ) as Promise<ClaimResult>;
    },

    atomicHandlers: s.atomicHandlers,

    atomicClaim<T>(request: ClaimRequest, run: Handler<T>, toOutcome: ToOutcome<T>) {
      const notNew = { executed: false } as const;
      const inProgress = { executed: false, inProgress: true } as const;
      return inTransaction<
        { executed: true; record: IdempotencyRecord; result: AtomicResult<T> } | typeof notNew | typeof inProgress
      >((t) =>
        chain(t.insertClaim(request), (row) => {
          if (row === CLAIM_IN_PROGRESS) throw new Rollback(inProgress);
          if (!row) throw new Rollback(notNew);
          const record = toRecord(row);
          return chain(runAndComplete(t, record, run, toOutcome, notNew), (result) => ({
            executed: true as const,
            record,
            result,
          }));
        }),
      );
    },

    atomicComplete<T>(owner: { scope: string; key: string; token: string }, run: Handler<T>, toOutcome: ToOutcome<T>) {
      const fenced = { completed: false } as const;
      return inTransaction<{ completed: true; record: IdempotencyRecord; result: AtomicResult<T> } | typeof fenced>(
        (t) =>
          chain(t.lockOwned(owner), (row) => {
            if (!row) throw new Rollback(fenced);
            const record = toRecord(row);
            return chain(runAndComplete(t, record, run, toOutcome, fenced), (result) => ({
              completed: true as const,
              record,
              result,
            }));
          }),
      );
    },

    complete: (args) => s.complete(args),
    release: (args) => s.release(args),

    async get(scope, key) {
      const row = await s.getLive(scope, key);
      return row ? toRecord(row) : null;
    },

    async timeline(scope, key) {
      // Live row first: a reuse landing between the two reads then only adds a history row for
      // the generation already shown live, which is filtered out, instead of hiding it.
      const live = await s.getLive(scope, key);
      const history = await s.history(scope, key);
      return toTimeline(live ? history.filter((row) => row.generation < live.generation) : history, live);
    },

    async sweep({ batchSize = DEFAULT_SWEEP_BATCH } = {}) {
      assertPositiveInteger('batchSize', batchSize);
      return { archived: await s.sweep(batchSize) };
    },

    async purge({ olderThanMs }) {
      if (!Number.isFinite(olderThanMs) || olderThanMs < 0)
        throw new RangeError(`[idem] purge: olderThanMs must be a non-negative number, got ${olderThanMs}`);
      let deleted = 0;
      // History first: a live tombstone is never archived earlier than the generations before it.
      for (const purgeBatch of [s.purgeHistory, s.purgeLive]) {
        let batch: number;
        do {
          batch = await purgeBatch(olderThanMs, PURGE_BATCH);
          deleted += batch;
        } while (batch === PURGE_BATCH);
      }
      return { deleted };
    },

    ping: () => s.ping(),
  };
}

export interface SweepAllOptions {
  /** Records archived per statement (each batch is one short transaction). Defaults to 1000. */
  batchSize?: number;
}

/**
 * Runs `store.sweep` until a batch comes back short, and returns how many records were
 * archived in total. Run it from a scheduled job (R3); any store of the contract works.
 */
export async function sweepAll(
  store: Pick<IdempotencyStore, 'sweep'>,
  { batchSize = DEFAULT_SWEEP_BATCH }: SweepAllOptions = {},
): Promise<{ archived: number }> {
  let archived = 0;
  for (;;) {
    const batch = (await store.sweep({ batchSize })).archived;
    archived += batch;
    if (batch < batchSize) return { archived };
  }
}

function assertPositiveInteger(name: string, value: number): void {
  if (!Number.isInteger(value) || value <= 0)
    throw new RangeError(`[idem] ${name} must be a positive integer, got ${value}`);
}
