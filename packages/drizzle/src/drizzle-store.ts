/**
 * `createDrizzleStore`: the store contract over drizzle, for SQLite, PostgreSQL and MySQL. The
 * claim rules are core's `decideClaim`, asked here once over the dialect's statements, which
 * perform the write it names; atomic mode is the dialect's transaction, driven by the engine.
 */
import {
  decideClaim,
  type ClaimDecision,
  type ClaimRequest,
  type ClaimResult,
  type IdempotencyStore,
  type StoreTransaction,
  type TransactionEnd,
} from '@idem/core/store';
import { grouped } from './group-commit.js';
import { detectDialect, type Dialect, type DrizzleDatabase } from './dialect.js';
import { defineMysqlTables } from './mysql/schema.js';
import { mysqlStatements } from './mysql/statements.js';
import { definePgTables } from './pg/schema.js';
import { pgStatements } from './pg/statements.js';
import { rejectingWithoutParameters, withoutParameters } from './query-errors.js';
import { renewalsOf } from './renewals.js';
import { waitCountsOf } from './wait-counts.js';
import { toRecord, toTimeline, type LiveRow } from './record-rows.js';
import { defineSqliteTables } from './sqlite/schema.js';
import { DEFAULT_BUSY_RETRY_MS } from './sqlite/busy.js';
import { sqliteStatements } from './sqlite/statements.js';
import type { StoreStatements } from './store-statements.js';
import { sweepLock, type SweepLock } from './sweep-lock.js';
import { inBatches, type BatchOptions, type BatchStop, type SweepRound } from './sweeper.js';
import { resolveTableNames, type TableNames, type TableOptions } from './table-names.js';

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
   * busy timeout waits synchronously, blocking the whole process. Ignored on PostgreSQL and MySQL.
   * Defaults to 5000 ms.
   */
  busyRetryMs?: number;
  /**
   * Group commit (on by default): claims whose first step arrives while earlier ones are in
   * flight are sent together as one statement and one commit (PostgreSQL: one multi-row
   * `INSERT … ON CONFLICT DO NOTHING RETURNING` with the read of the rows that conflicted),
   * and completions likewise (one `UPDATE … FROM (VALUES …)`), and the lease renewals of running
   * handlers (E6; one `UPDATE … WHERE (scope, key, token) IN …` per group, on one lane of the
   * pool); a lone request is sent at once,
   * with no timer. Every rule holds as without it: each request gets the answer its own
   * statement would have given. The trade-off: a group's latency is that of its statement, and
   * when the statement fails the whole group failed (nothing of it was written); each of its
   * requests is then retried alone, and answers 503 only if its own retry fails too.
   * `false` sends one statement per request, exactly as before. Every dialect has the many
   * forms (PostgreSQL, SQLite on better-sqlite3 and libsql, MySQL).
   */
  groupCommit?: boolean;
}

/**
 * An {@link IdempotencyStore} backed by drizzle, with the dialect, driver and table names it
 * uses, and atomic mode where the driver's transactions can await (`transaction`; the handler
 * gets the drizzle transaction, typed as `TTx`): on every driver but better-sqlite3 (see the
 * Drivers table, docs/drizzle.md#drivers).
 */
export interface DrizzleStore<TTx = unknown> extends IdempotencyStore<TTx> {
  readonly dialect: Dialect;
  /** The driver the drizzle instance wraps, as in drizzle's import path (`node-postgres`, `postgres-js`, `pglite`, `better-sqlite3`, `libsql`, `mysql2`). */
  readonly driver: string;
  readonly tables: TableNames;
  /**
   * R3: physically deletes records archived more than `olderThanMs` ago (history rows first,
   * then archived live rows, 5000 per statement), reporting each batch to `onBatch`, and stopping
   * early on `budgetMs` or `signal` (then `stopped` says which).
   */
  purge(options: { olderThanMs: number } & BatchOptions): Promise<PurgeResult>;
  /**
   * Sweeps every expired record, batch after batch (as {@link sweepAll}), if no other process is
   * sweeping these tables now: `{ skipped: true }` when one is (the dialect's lock, taken
   * without waiting: PostgreSQL's `pg_try_advisory_xact_lock`, MySQL's `GET_LOCK`, a lease row
   * on SQLite). On PostgreSQL and MySQL the lock holds one pool connection for the round.
   */
  sweepExclusive(options?: SweepAllOptions): Promise<SweepRound>;
}

/** What a purge did: rows deleted, in how many batches, and why it ended. */
export interface PurgeResult {
  deleted: number;
  batches: number;
  elapsedMs: number;
  stopped: BatchStop;
}

/** How many times a claim re-reads after losing a compare-and-set before it gives up. */
const MAX_CLAIM_ROUNDS = 8;
/** Rows deleted per statement by `purge`, so that no single statement holds locks for long. */
const PURGE_BATCH = 5000;
const DEFAULT_SWEEP_BATCH = 1000;

/** The transaction drizzle hands a transaction's callback: what atomic mode's `claim.tx` is. */
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
  { tables: tableOptions = {}, busyRetryMs = DEFAULT_BUSY_RETRY_MS, groupCommit = true }: DrizzleStoreOptions = {},
): DrizzleStore<DrizzleTransaction<TDb>> {
  const tables = resolveTableNames(tableOptions);
  const detected = detectDialect(db);
  let statements: StoreStatements;
  try {
    statements =
      detected.dialect === 'postgres'
        ? pgStatements(detected.db, definePgTables(tables))
        : detected.dialect === 'mysql'
          ? mysqlStatements(detected.db, defineMysqlTables(tables))
          : sqliteStatements(detected.sqlite, defineSqliteTables(tables), busyRetryMs);
  } catch (error) {
    // better-sqlite3 prepares the statements here, and refuses a missing table at start-up.
    throw withoutParameters(error, tables, detected.dialect);
  }
  return storeOver<DrizzleTransaction<TDb>>(
    statements,
    detected.dialect,
    detected.driver.name,
    tables,
    sweepLock(detected, tables),
    groupCommit,
  );
}

/**
 * The store over a dialect's statements. Every method rejects with {@link withoutParameters}
 * of the failure (K5: drizzle's query errors list the statement's parameters).
 */
function storeOver<TTx>(
  s: StoreStatements,
  dialect: Dialect,
  driver: string,
  tables: TableNames,
  lock: SweepLock,
  groupCommit: boolean,
): DrizzleStore<TTx> {
  // The fresh path's two statements, grouped when the dialect has their many forms.
  const { claimOrReadMany, completeMany, groupMode = 'inFlight' } = s;
  const claimOrRead: StoreStatements['claimOrRead'] =
    groupCommit && claimOrReadMany
      ? grouped((request) => s.claimOrRead(request), claimOrReadMany.bind(s), { mode: groupMode })
      : (request) => s.claimOrRead(request);
  const complete: StoreStatements['complete'] =
    groupCommit && completeMany
      ? grouped((args) => s.complete(args), completeMany.bind(s), { mode: groupMode })
      : (args) => s.complete(args);
  const renew = renewalsOf(s, groupCommit, groupMode);
  const countWait = waitCountsOf(s, groupCommit, groupMode);

  /** The write of the rule `decideClaim` chose, on the row it read; undefined when it lost a race. */
  async function write(request: ClaimRequest, decision: ClaimWrite): Promise<ClaimResult | undefined> {
    switch (decision.rule) {
      case 'insert':
        return claimedAs(await s.insertClaim(request));
      case 'reclaim':
        return claimedAs(await s.reclaimReleased(request, decision.record.token));
      case 'takeover': {
        const { token, leaseUntil } = decision.record;
        const row = await s.takeOverStale(request, token);
        const takeover = { previousToken: token, previousLeaseUntil: leaseUntil };
        return row && { outcome: 'claimed', record: toRecord(row), takeover };
      }
      case 'resume': {
        const row = await s.resumeResumable(request, decision.record.token);
        const resumed = row && { attempt: row.attempts, previousStatus: decision.record.outcomeStatus };
        return row && resumed && { outcome: 'claimed', record: toRecord(row), resumed };
      }
      case 'reuse': {
        const reused = await s.reuseExpired(request, decision.record);
        return reused && { outcome: 'claimed', record: toRecord(reused.record), expired: toRecord(reused.archived) };
      }
    }
  }

  /**
   * A new key and a replay are the first step alone. Otherwise: the write of the rule the row
   * asks for, and while a compare-and-set or an insert loses to a concurrent claimant (or the row
   * is purged in between), read and decide again.
   */
  async function claim(request: ClaimRequest): Promise<ClaimResult> {
    try {
      const first = await claimOrRead(request);
      if (first && 'inserted' in first) return { outcome: 'claimed', record: toRecord(first.inserted) };
      let seen = first ? first.live : await s.readLive(request.scope, request.key);
      for (let round = 0; round < MAX_CLAIM_ROUNDS; round++) {
        const decision = decideClaim(seen?.row, request, seen ? seen.now.getTime() : 0);
        // Rule 6: a group whose statement committed but whose answer was lost, retried alone,
        // finds the row it wrote; the request owns it, as the first answer would have said.
        if (decision.rule === 'own') return { outcome: 'claimed', record: toRecord(decision.record) };
        if (decision.rule !== 'existing') {
          const result = await write(request, decision);
          if (result) return result;
        } else if (seen) {
          return { outcome: 'existing', record: toRecord(decision.record), now: seen.now, expired: decision.expired };
        }
        seen = await s.readLive(request.scope, request.key);
      }
    } catch (error) {
      throw withoutParameters(error, tables, dialect);
    }
    throw new Error(`[idem] claim did not settle after ${MAX_CLAIM_ROUNDS} rounds of contention on one key`);
  }

  const { transaction } = s;
  const guarded = <A extends unknown[], R>(method: (...args: A) => Promise<R>) =>
    rejectingWithoutParameters(method, tables, dialect);
  return {
    dialect,
    driver,
    tables,
    claim,
    ...(transaction && {
      async transaction<R>(work: (t: StoreTransaction<TTx>) => Promise<TransactionEnd<R>>): Promise<R> {
        try {
          // The dialect hands `work` drizzle's own transaction, which `TTx` names for the caller.
          return await transaction(work as (t: StoreTransaction) => Promise<TransactionEnd<R>>);
        } catch (error) {
          throw withoutParameters(error, tables, dialect);
        }
      },
    }),
    complete: guarded(complete),
    saveStep: guarded((args) => s.saveStep(args)),
    renew: guarded(renew),
    countWait: guarded(countWait),
    release: guarded((args) => s.release(args)),
    get: guarded(async (scope, key) => {
      const row = await s.getLive(scope, key);
      return row ? toRecord(row) : null;
    }),
    timeline: guarded(async (scope, key) => {
      // Live row first: a reuse landing between the two reads then only adds a history row for
      // the generation already shown live, which is filtered out, instead of hiding it.
      const live = await s.getLive(scope, key);
      const history = await s.history(scope, key);
      return toTimeline(live ? history.filter((row) => row.generation < live.generation) : history, live);
    }),
    sweep: guarded(async ({ batchSize = DEFAULT_SWEEP_BATCH } = {}) => {
      assertPositiveInteger('batchSize', batchSize);
      return { archived: await s.sweep(batchSize) };
    }),
    purge: guarded(async ({ olderThanMs, ...progress }) => {
      if (!Number.isFinite(olderThanMs) || olderThanMs < 0)
        throw new RangeError(`[idem] purge: olderThanMs must be a non-negative number, got ${olderThanMs}`);
      // History first: a live tombstone is never archived earlier than the generations before it.
      const { total, ...rest } = await inBatches(
        [() => s.purgeHistory(olderThanMs, PURGE_BATCH), () => s.purgeLive(olderThanMs, PURGE_BATCH)],
        PURGE_BATCH,
        progress,
      );
      return { deleted: total, ...rest };
    }),
    sweepExclusive: guarded(async ({ batchSize = DEFAULT_SWEEP_BATCH, ...progress }: SweepAllOptions = {}) => {
      assertPositiveInteger('batchSize', batchSize);
      const round = await lock(async (stillHeld) =>
        inBatches([() => s.sweep(batchSize)], batchSize, progress, stillHeld),
      );
      if (!round.ran) return { skipped: true };
      const { total, ...rest } = round.value;
      return { skipped: false, archived: total, ...rest };
    }),
    ping: guarded(() => s.ping()),
  };
}

/** A rule of `decideClaim` that writes. */
type ClaimWrite = Exclude<ClaimDecision<LiveRow>, { rule: 'existing' | 'own' }>;

/** A claim the store wrote (rules 1 and 3), or undefined when its insert or compare-and-set lost. */
function claimedAs(row: LiveRow | undefined): ClaimResult | undefined {
  return row && { outcome: 'claimed', record: toRecord(row) };
}

export interface SweepAllOptions extends BatchOptions {
  /** Records archived per statement (each batch is one short transaction). Defaults to 1000. */
  batchSize?: number;
}

/** What a sweep did: records archived, in how many batches, and why it ended. */
export interface SweepAllResult {
  archived: number;
  batches: number;
  elapsedMs: number;
  stopped: BatchStop;
}

/**
 * Runs `store.sweep` until a batch comes back short (or the budget or signal stops it after a
 * batch), and returns how many records were archived in total. Run it from a scheduled job
 * (R3); any store of the contract works. It takes no lock: in a fleet, prefer
 * `store.sweepExclusive` or {@link startSweeper}.
 */
export async function sweepAll(
  store: Pick<IdempotencyStore, 'sweep'>,
  { batchSize = DEFAULT_SWEEP_BATCH, ...progress }: SweepAllOptions = {},
): Promise<SweepAllResult> {
  const { total, ...rest } = await inBatches(
    [async () => (await store.sweep({ batchSize })).archived],
    batchSize,
    progress,
  );
  return { archived: total, ...rest };
}

function assertPositiveInteger(name: string, value: number): void {
  if (!Number.isInteger(value) || value <= 0)
    throw new RangeError(`[idem] ${name} must be a positive integer, got ${value}`);
}
