/**
 * What a dialect provides: the store's statements, each one SQL statement (or, for the rare
 * reuse of an expired key, one transaction) evaluated with the database clock. The rules that
 * choose between them live once, in `drizzle-store.ts`.
 */
import type { AtomicResult, ClaimRequest, StoredOutcome } from '@idem/core/store';
import type { Eventually } from './eventually.js';
import type { HistoryRow, LiveRow } from './record-rows.js';

/** What the first step of a claim found: the row it inserted, the live row with the clock, or neither. */
export type FirstStep = { inserted: LiveRow } | { live: { row: LiveRow; now: Date } } | undefined;

export interface StoreStatements {
  /** Rule 1: `INSERT … ON CONFLICT (scope, key) DO NOTHING RETURNING *`; undefined when the key exists. */
  insertClaim(request: ClaimRequest): Promise<LiveRow | undefined>;
  /** The live row together with the database clock, or undefined when there is none. */
  readLive(scope: string, key: string): Promise<{ row: LiveRow; now: Date } | undefined>;
  /**
   * Rule 1 and the read of an existing row in one step: the inserted row, or the live row with
   * the clock, or undefined when the insert conflicted with a row the step could not read (a
   * concurrent claim committed meanwhile; the caller then re-reads). PostgreSQL: one
   * data-modifying CTE, one round trip. SQLite: the read first, then the insert on a miss.
   */
  claimOrRead(request: ClaimRequest): Eventually<FirstStep>;
  /** Rule 3, compare-and-set on the released owner's token; undefined when the CAS lost. */
  reclaimReleased(request: ClaimRequest, releasedToken: string): Promise<LiveRow | undefined>;
  /** Rule 4, compare-and-set on the stale owner's token and lease; undefined when the CAS lost. */
  takeOverStale(request: ClaimRequest, staleToken: string): Promise<LiveRow | undefined>;
  /**
   * Rule 2: in one transaction, if `seen` is still the live generation and still expired, copy
   * it into history and turn the live row into generation + 1 owned by the request;
   * undefined when another claimant got there first.
   */
  reuseExpired(request: ClaimRequest, seen: LiveRow): Promise<{ record: LiveRow; archived: HistoryRow } | undefined>;
  complete(args: { scope: string; key: string; token: string; outcome: StoredOutcome }): Promise<boolean>;
  release(args: { scope: string; key: string; token: string }): Promise<boolean>;
  getLive(scope: string, key: string): Promise<LiveRow | undefined>;
  /** History rows of (scope, key), oldest generation first. */
  history(scope: string, key: string): Promise<HistoryRow[]>;
  /** Archives up to `batchSize` expired live rows in place; returns how many. */
  sweep(batchSize: number): Promise<number>;
  /** Deletes up to `limit` archived live rows archived before now - `olderThanMs`; returns how many. */
  purgeLive(olderThanMs: number, limit: number): Promise<number>;
  /** Deletes up to `limit` history rows archived before now - `olderThanMs`; returns how many. */
  purgeHistory(olderThanMs: number, limit: number): Promise<number>;
  ping(): Promise<void>;

  /** Atomic mode: whether a handler may await inside a transaction (see `AtomicMode.atomicHandlers`). */
  readonly atomicHandlers: 'synchronous' | 'asynchronous';
  /**
   * Atomic mode: runs `work` in one transaction, committed when it returns and rolled back when
   * it throws. On SQLite `work` and everything it calls are synchronous (`BEGIN IMMEDIATE`).
   */
  transaction<R>(work: (t: TransactionStatements) => Eventually<R>): Promise<R>;
}

/** What atomic mode's insert answers when another transaction is claiming the same key right now. */
export const CLAIM_IN_PROGRESS = 'claim in progress';

/** The statements of atomic mode, bound to one open transaction. */
export interface TransactionStatements {
  /**
   * Rule 1 of `claim`, inside the transaction: the inserted row, undefined when the key has a
   * record, or {@link CLAIM_IN_PROGRESS} when another transaction is claiming it at this moment
   * (PostgreSQL: its transaction-level advisory lock on the key is held), answered without
   * waiting for that transaction.
   */
  insertClaim(request: ClaimRequest): Eventually<LiveRow | undefined | typeof CLAIM_IN_PROGRESS>;
  /** The live row if `token` owns it `processing`, locked until the transaction ends (`FOR UPDATE`; SQLite's write lock). */
  lockOwned(owner: { scope: string; key: string; token: string }): Eventually<LiveRow | undefined>;
  /** `complete`, inside the transaction. */
  complete(args: { scope: string; key: string; token: string; outcome: StoredOutcome }): Eventually<boolean>;
  /**
   * Runs the handler on a savepoint, handing it the (nested) drizzle transaction: when it throws,
   * its writes are rolled back to the savepoint and its error is the result. On SQLite a handler
   * that returns a promise is refused with a `TypeError` that rolls the whole transaction back.
   */
  savepoint<T>(run: (tx: unknown) => T | Promise<T>): Eventually<AtomicResult<T>>;
}
