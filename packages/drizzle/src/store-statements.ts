/**
 * What a dialect provides: the store's statements, each one SQL statement (or, for the rare
 * reuse of an expired key, one short transaction) evaluated with the database clock, and atomic
 * mode's transaction. Which rule applies is decided once, by core's `decideClaim`, asked in `drizzle-store.ts`;
 * the statements only perform the write it names, each a compare-and-set guarded by the helpers
 * of `row-writes.ts`.
 *
 * The fresh path is `claimOrRead` and then `complete`, one answer per request; with their many
 * forms (`claimOrReadMany`, `completeMany`: every dialect has them, in its `groups.ts`), the store
 * groups concurrent requests' first steps and completions into one statement or transaction each
 * (group commit), whose bookkeeping is `group-commit.ts`.
 */
import type {
  AtomicMode,
  ClaimOwner,
  ClaimRenewal,
  ClaimRequest,
  CompleteArgs,
  GenerationRef,
  SaveStepArgs,
  StoredOutcome,
} from '@idem/core/store';
import type { HistoryRow, LiveRead, LiveRow } from './record-rows.js';

/**
 * A completion: the owner and the outcome it stores, `resumable` (E8) or not (`complete`, and
 * each request of `completeMany`).
 */
export type Completion = CompleteArgs;

/** What the first step of a claim found: the row it inserted, or the live row with the clock. */
export type FirstStep = { inserted: LiveRow } | { live: LiveRead };

export interface StoreStatements {
  /**
   * Rule 1 and the read of an existing row in one step: the inserted row, or the live row with
   * the clock, or undefined when the insert conflicted with a row the step could not read (a
   * concurrent claim committed meanwhile; the caller then reads again). PostgreSQL: one
   * data-modifying CTE, one round trip. SQLite, MySQL: the read first, then the insert on a miss.
   */
  claimOrRead(request: ClaimRequest): Promise<FirstStep | undefined>;
  /** Rule 1: `INSERT … ON CONFLICT (scope, key) DO NOTHING`; the inserted row, undefined when the key exists. */
  insertClaim(request: ClaimRequest): Promise<LiveRow | undefined>;
  /** The live row together with the database clock, or undefined when there is none. */
  readLive(scope: string, key: string): Promise<LiveRead | undefined>;
  /** Rule 3, compare-and-set on the released owner's token; undefined when the CAS lost. */
  reclaimReleased(request: ClaimRequest, releasedToken: string): Promise<LiveRow | undefined>;
  /** Rule 4, compare-and-set on the stale owner's token and lease; undefined when the CAS lost. */
  takeOverStale(request: ClaimRequest, staleToken: string): Promise<LiveRow | undefined>;
  /** E8, the resume rule, compare-and-set on the `resumable` record's token; undefined when the CAS lost. */
  resumeResumable(request: ClaimRequest, resumableToken: string): Promise<LiveRow | undefined>;
  /** E8: one recovery point on the owner's `processing` claim (`steps.ts`); false when it is not the owner's. */
  saveStep(args: SaveStepArgs): Promise<boolean>;
  /**
   * Rule 2: in one transaction, if `seen` is still the live generation and still expired, copy
   * it into history and turn the live row into generation + 1 owned by the request;
   * undefined when another claimant got there first.
   */
  reuseExpired(request: ClaimRequest, seen: LiveRow): Promise<{ record: LiveRow; archived: HistoryRow } | undefined>;
  complete(args: Completion): Promise<boolean>;
  /**
   * Group commit: the first step of several claims in one statement/transaction; results in input
   * order, each meaning exactly what `claimOrRead` of that request means (undefined: the insert
   * conflicted with a row this step could not read, e.g. a duplicate key inside the same group;
   * the store's loop then reads again). One rejection = the whole group failed (nothing of it was
   * written).
   */
  claimOrReadMany?(requests: ClaimRequest[]): Promise<Array<FirstStep | undefined>>;
  /** Group commit: several completions in one statement/transaction; `true` where that owner's row was completed, in input order. */
  completeMany?(args: Completion[]): Promise<boolean[]>;
  /**
   * How a group forms (`group-commit.ts`): 'inFlight' (drivers whose statements are in flight for
   * a round trip: requests that arrive while earlier writes are in flight go together as the next
   * group) or 'tick' (drivers that run a statement synchronously: better-sqlite3, and libsql on a
   * local file behind its promises; the first call runs at once, calls made while that tick's
   * group is open go together when setImmediate flushes it).
   */
  groupMode?: 'inFlight' | 'tick';
  release(args: ClaimOwner): Promise<boolean>;
  /** E6: the lease of the owner's `processing` claim runs again from now; false when it is not the owner's (`renewals.ts`). */
  renew(args: ClaimRenewal): Promise<boolean>;
  /** Group commit: several renewals in one statement per lease; `true` where that owner's claim was renewed, in input order. */
  renewMany?(args: ClaimRenewal[]): Promise<boolean[]>;
  /** E3w, A1: `waits + count` on the live row while it is still that generation; false when it is not (`wait-counts.ts`). */
  addWaits(ref: GenerationRef, count: number): Promise<boolean>;
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
  /**
   * Atomic mode's transaction (the store contract's `AtomicMode`), on drizzle's transaction (`openTransaction`);
   * absent where a transaction cannot span the handler's `await`s (better-sqlite3).
   */
  transaction: AtomicMode['transaction'] | undefined;
}
