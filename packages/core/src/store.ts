/**
 * The store contract. A store keeps one live record per (scope, key) and the earlier
 * generations of that key as history. Everything that must be atomic happens inside
 * `claim`, `complete` and `release` (and, in atomic mode, inside one `transaction`); the engine
 * holds no state of its own.
 *
 * Timestamps are taken from the store's clock (R1), never from the application.
 * Store authors: import these types and the shared rules from `@idem/core/store`, and run
 * `runStoreConformance` from `@idem/core/conformance` against your store.
 */

/**
 * - `processing`: claimed, the handler may be running; guarded by `leaseUntil`.
 * - `completed`: an outcome is stored and replayed until `expiresAt` (completion + retention, R1).
 * - `released`: the claim was given back before the handler started (E4); the next claim
 *   takes the record over as if it were new (same generation, no event besides `claimed`).
 * - `archived`: retention passed and the sweeper archived it; the body may be gone.
 * - `resumable` (E8, `onFailure: 'resume'`): the handler failed after it started; that attempt's
 *   outcome is kept in `outcome` (for the timeline) and is NOT replayed: the next claim with a
 *   matching fingerprint resumes the record (same generation, `attempts + 1`, steps kept).
 */
export type RecordState = 'processing' | 'completed' | 'released' | 'archived' | 'resumable';

/**
 * E8: what a handler does with a failure after it started, per endpoint. `'replay'` (Stripe v1,
 * the default): the failure is stored and replayed like any outcome (E4). `'resume'` (Stripe v2):
 * it leaves the record `resumable`, and a retry with the same key completes the work, skipping
 * the steps already done.
 */
export type OnFailure = 'replay' | 'resume';

/**
 * E8: one recovery point of a record (`claim.step(name, fn)`): its name and its result, serialized
 * like an outcome. `result` is null once the record was archived (the name is kept for audits).
 */
export interface StoredStep {
  name: string;
  result: string | null;
}

/** What the handler produced, as the serializer wrote it. */
export interface StoredOutcome {
  /** `success`: the handler returned. `error`: it threw (E4: stored too). */
  kind: 'success' | 'error';
  /** HTTP-equivalent status: 200 for a success, the error's status otherwise. */
  status: number;
  /** The serialized value or error, as text (never jsonb: key order must survive). `null` once archived. */
  body: string | null;
}

export interface IdempotencyRecord {
  scope: string;
  key: string;
  /** 1 for the first use of (scope, key); +1 each time the key is reused after it expired (R2). */
  generation: number;
  /** `null` when the endpoint has no fingerprint (F2). */
  fingerprint: string | null;
  state: RecordState;
  /** Fencing token of the current owner (E6). Changes on every claim and takeover. */
  token: string;
  /** When this generation was first seen. */
  createdAt: Date;
  /** A `processing` record belongs to its owner until then (E6). */
  leaseUntil: Date;
  /**
   * Retention end (R1), on the store's clock. Retention counts from completion: a claim carries
   * `createdAt + retention`, and `complete` moves it to `completedAt + retention`. A `processing`
   * claim inside its lease is never expired, whatever this says.
   */
  expiresAt: Date;
  completedAt: Date | null;
  archivedAt: Date | null;
  /** How many times a stale claim of this generation was taken over (E6). */
  takeovers: number;
  /**
   * How many duplicates waited for this generation's outcome (E3w), each counted once, when its
   * wait began. A new claim of the record (rules 1–3) starts it at 0; a takeover keeps it.
   */
  waits: number;
  outcome: StoredOutcome | null;
  /**
   * E8: the mode of this generation, fixed when it was claimed (rules 1–3, from the request) and
   * kept by a takeover and a resume. The engine decides a failure's fate from it, never from the
   * endpoint's current configuration.
   */
  onFailure: OnFailure;
  /**
   * E8: how many executions of this generation started: 1 on a new claim (rules 1–3), + 1 on a
   * takeover (rule 4) and on a resume.
   */
  attempts: number;
  /**
   * E8: the recovery points this generation completed, in completion order: `[]` on a new claim
   * (rules 1–3), kept by a takeover and a resume. Archiving keeps the names, results become null.
   */
  steps: StoredStep[];
}

export interface ClaimRequest {
  scope: string;
  key: string;
  fingerprint: string | null;
  /** The new owner's fencing token (unique per attempt, chosen by the engine). */
  token: string;
  leaseMs: number;
  retentionMs: number;
  /**
   * What to do when the live record's retention has passed (`expiresAt <= now`, unless it is a
   * `processing` claim inside its lease; or it was archived):
   * `'execute'` archives it into history and claims generation + 1;
   * `'reject'` changes nothing and answers `existing` with `expired: true`.
   */
  expiredReuse: 'execute' | 'reject';
  /**
   * E8: the mode a new claim (rules 1–3) stores on the record. Absent reads as `'replay'`. A
   * takeover or a resume keeps the record's own.
   */
  onFailure?: OnFailure;
}

export type ClaimResult =
  | {
      outcome: 'claimed';
      /** The record now owned by `request.token`, state `processing`. */
      record: IdempotencyRecord;
      /** R2: the earlier generation this claim replaced, as archived (its outcome status kept). */
      expired?: IdempotencyRecord;
      /** E6: this claim took over a `processing` record whose lease had passed. */
      takeover?: { previousToken: string; previousLeaseUntil: Date };
      /**
       * E8: this claim resumed a `resumable` record (same generation): `attempt` is the record's
       * `attempts` now, `previousStatus` the status of the failed attempt's stored outcome.
       */
      resumed?: { attempt: number; previousStatus: number | null };
    }
  | {
      outcome: 'existing';
      /** The live record, unchanged. */
      record: IdempotencyRecord;
      /** The store's clock when it answered (for `Retry-After`). */
      now: Date;
      /** True when the record's retention has passed and `expiredReuse` was `'reject'`. */
      expired: boolean;
    };

/**
 * One generation of a key, for audits (A1).
 */
export interface TimelineEntry {
  generation: number;
  state: RecordState;
  fingerprint: string | null;
  firstSeenAt: Date;
  completedAt: Date | null;
  /** Outcome status (200, 500, …); null when none was stored. */
  status: number | null;
  outcomeKind: 'success' | 'error' | null;
  expiresAt: Date;
  archivedAt: Date | null;
  /** When a later generation replaced this one (the key was reused after it expired). */
  reusedAt: Date | null;
  /** How many times a stale claim of this generation was taken over (E6). */
  takeovers: number;
  /** How many duplicates waited for this generation's outcome (E3w): see {@link IdempotencyRecord.waits}. */
  waits: number;
  /** E8: the generation's mode (see {@link IdempotencyRecord.onFailure}). */
  onFailure: OnFailure;
  /** E8: how many executions of this generation started (see {@link IdempotencyRecord.attempts}). */
  attempts: number;
  /** E8: the names of the recovery points it completed, in order (their results are not shown). */
  steps: string[];
}

/** Who owns a claim: the record (scope, key) and the owner's fencing token. */
export interface ClaimOwner {
  scope: string;
  key: string;
  token: string;
}

/** One generation of (scope, key): what {@link IdempotencyStore.countWait} counts a wait on. */
export interface GenerationRef {
  scope: string;
  key: string;
  generation: number;
}

/** A renewal of a claim's lease (E6): the owner, and the lease it extends to from now. */
export interface ClaimRenewal extends ClaimOwner {
  leaseMs: number;
}

/** What {@link IdempotencyStore.complete} stores: the owner, the outcome, and whether the failure is resumable (E8). */
export type CompleteArgs = ClaimOwner & {
  outcome: StoredOutcome;
  /**
   * E8: the record becomes `resumable` instead of `completed`: the outcome is kept (not replayed),
   * `completedAt` stays null and `expiresAt` is left as it is: the window a resumable failure may
   * be resumed in counts from the first sight, so that the completion ending it still finds the
   * retention as `expiresAt − createdAt`, however many attempts came before.
   */
  resumable?: boolean;
};

/** What {@link IdempotencyStore.saveStep} stores: the owner, and one recovery point (E8). */
export type SaveStepArgs = ClaimOwner & { name: string; result: string };

/** What {@link StoreTransaction.insertClaim} found. */
export type TransactionClaim =
  /** Rule 1 inside the transaction: the record now owned by `request.token`, invisible to others until the commit. */
  | { outcome: 'claimed'; record: IdempotencyRecord }
  /** (scope, key) has a record: the engine takes the `claim` path instead. */
  | { outcome: 'exists' }
  /** Another transaction is claiming (scope, key) at this moment; answered without waiting for it. */
  | { outcome: 'inProgress' };

/**
 * How the work of a {@link AtomicMode.transaction} ends it: committed, or rolled back. `value` is
 * what `transaction` answers in either case.
 */
export type TransactionEnd<R> = { commit: boolean; value: R };

/**
 * The statements of atomic mode, bound to one open database transaction. The engine calls them
 * in this order: `insertClaim` (a new key) or `lockOwned` (a claim it already holds), then the
 * handler through `savepoint`, then `complete`.
 */
export interface StoreTransaction<TTx = unknown> {
  /**
   * Rule 1 of `claim`, inside the transaction: `INSERT … ON CONFLICT DO NOTHING`. Answers
   * `inProgress` at once, without waiting, when another transaction is claiming the same key
   * right now (its claim not committed yet): a duplicate must not hold a connection for as long
   * as the first handler runs.
   */
  insertClaim(request: ClaimRequest): Promise<TransactionClaim>;
  /** The live record if `owner.token` owns it `processing`, locked until the transaction ends; null otherwise (fenced out, E6). */
  lockOwned(owner: ClaimOwner): Promise<IdempotencyRecord | null>;
  /** `complete` (see {@link IdempotencyStore.complete}), inside the transaction; false when `owner.token` does not own the claim. */
  complete(args: CompleteArgs): Promise<boolean>;
  /** E8: `saveStep` (see {@link IdempotencyStore.saveStep}), inside the transaction; false when `owner.token` does not own the claim. */
  saveStep(args: SaveStepArgs): Promise<boolean>;
  /**
   * E8: the writes made so far in the enclosing `savepoint` are kept: when its work throws, the
   * rollback goes back to the latest recovery point instead of the savepoint's start. (SQL:
   * `SAVEPOINT idem_recovery`, and `ROLLBACK TO SAVEPOINT idem_recovery` on failure.)
   */
  recoveryPoint(): Promise<void>;
  /**
   * Runs `work` on a savepoint, handing it the transaction to write through (`claim.tx`), and
   * answers what it returns. When `work` throws, its writes are rolled back to the savepoint and
   * `savepoint` rejects with the same error; the transaction goes on.
   */
  savepoint<T>(work: (tx: TTx) => Promise<T> | T): Promise<T>;
}

/**
 * Atomic mode, an optional capability (`engine.executeAtomic`, the adapters' `atomic: true`): the
 * handler runs inside the store's database transaction and writes through it, so that its writes
 * commit together with the claim and the stored outcome, or not at all. The engine drives it; the
 * store only opens the transaction and runs the statements. `TTx` is the transaction the handler
 * is given (`claim.tx`). `MemoryStore` has no atomic mode; which drivers of `@idem/drizzle` have
 * it is listed once, in its Drivers table (docs/drizzle.md#drivers).
 */
export interface AtomicMode<TTx = unknown> {
  /**
   * Opens a database transaction and runs `work` in it, then commits or rolls back as `work`'s
   * {@link TransactionEnd} says and answers its `value`. Rejects, with everything rolled back,
   * when the backend fails: to open the transaction, in a statement of `work`, or to commit it
   * (a transaction that failed to commit did not happen). `work` itself never rejects otherwise.
   */
  transaction<R>(work: (t: StoreTransaction<TTx>) => Promise<TransactionEnd<R>>): Promise<R>;
}

/**
 * The contract every store implements. All methods may reject when the backend is
 * unreachable; the engine turns that into a 503 (E5). {@link AtomicMode}'s `transaction` is
 * optional: a store without it has no atomic mode. `TTx` is the type of the transaction atomic
 * mode hands the handler (`claim.tx`); `unknown` for a store without atomic mode.
 */
export interface IdempotencyStore<TTx = unknown> extends Partial<AtomicMode<TTx>> {
  /**
   * Atomically claims (scope, key) — exactly one concurrent caller wins (E1) — or answers
   * with the live record. Rules, all evaluated with the store's clock `now`:
   * 1. no live record → insert generation 1, `processing`, lease and retention from now, the
   *    request's `onFailure` (absent: `'replay'`), `attempts` 1, `steps` []: `claimed`;
   * 2. live record expired (`archived`, or `expiresAt <= now` and not a `processing` claim with
   *    `leaseUntil > now`: a claim inside its lease never expires, R1) → `expiredReuse: 'execute'`: move
   *    it to history (archived, `reusedAt = now`) and claim generation + 1: `claimed` with
   *    `expired`; `'reject'`: `existing` with `expired: true`;
   * 3. `released` → take it over as new (new token, fingerprint, timestamps, `onFailure`,
   *    `attempts` 1, `steps` []): `claimed`;
   * 3b. (E8) `resumable`, and fingerprints match (equal, or either is null) → new token, lease
   *    from now, state `processing`, `attempts + 1`, outcome null, steps, waits and `onFailure`
   *    kept, same generation: `claimed` with `resumed`; a mismatch answers `existing` (422);
   * 4. `processing`, `leaseUntil <= now`, and fingerprints match (equal, or either is null)
   *    → new token and lease, `takeovers + 1`, `attempts + 1` (steps kept): `claimed` with `takeover`;
   * 5. otherwise → `existing` (the engine decides: replay, 409 or 422);
   * 6. asked before rules 2–5: a `processing` record that holds `request.token` is the request's
   *    own claim (a token is unique to one request: its first answer was lost, e.g. a group
   *    commit whose statement committed before the connection failed, and the store retried)
   *    → `claimed` with the record as it is, nothing written; answering `existing` would hold the
   *    request's own client off until the lease ends.
   *
   * The choice between the rules is `decideClaim(record, request, now)` (`@idem/core/store`): a
   * store reads the live record and the clock, asks it, and performs the write it names
   * atomically (a compare-and-set on the record it read; read again when that lost).
   */
  claim(request: ClaimRequest): Promise<ClaimResult>;

  /**
   * Stores the outcome if `token` still owns the `processing` record, with `completedAt = now`
   * and `expiresAt = now + (expiresAt − createdAt)`: retention counts from completion (R1).
   * Returns false when it does not own it (fenced out by a takeover, E6): the record is left untouched.
   * With `resumable: true` (E8) the record becomes `resumable` instead: the outcome is stored (not
   * replayed), `completedAt` stays null, and `expiresAt` is left as it is (see {@link CompleteArgs}).
   */
  complete(args: CompleteArgs): Promise<boolean>;

  /**
   * E8: stores one recovery point if `token` still owns the `processing` record: appends
   * `{ name, result }` to `steps` (replaces an entry of the same name in place). Returns false
   * when it does not own it (fenced out, E6): the record is left untouched.
   */
  saveStep(args: SaveStepArgs): Promise<boolean>;

  /**
   * E6: extends the lease of a claim its owner still runs: if `token` owns the `processing`
   * record, `leaseUntil` becomes now + `leaseMs` (the store's clock) and it answers true;
   * otherwise (taken over, completed, released, gone) false, and the record is left untouched.
   * The engine calls it every third of the lease while the handler runs, so that only a claim
   * whose owner stopped renewing (died, lost its store, stalled past the lease) is taken over.
   */
  renew(args: ClaimRenewal): Promise<boolean>;

  /**
   * E3w, A1: counts one duplicate that waits for the outcome of `generation` of (scope, key):
   * if the live record is still that generation (in any state), its `waits` becomes `waits + 1`
   * and it answers true; otherwise (gone, or reused as a later generation) false, and nothing
   * changes. Not fenced: any duplicate may count, and only `waits` is written. The engine calls
   * it once per waiting duplicate, when the wait begins, and waits on regardless of the answer
   * or of a rejection. A store may send concurrent calls as one write (`waits + n`).
   */
  countWait(args: GenerationRef): Promise<boolean>;

  /**
   * Gives back a claim whose handler never started (E4): if `token` owns the `processing`
   * record it becomes `released`. Returns false when the token no longer owns it.
   */
  release(args: { scope: string; key: string; token: string }): Promise<boolean>;

  /** The live record of (scope, key), or null. */
  get(scope: string, key: string): Promise<IdempotencyRecord | null>;

  /** Every generation of (scope, key), oldest first (A1). */
  timeline(scope: string, key: string): Promise<TimelineEntry[]>;

  /**
   * R3: archives up to `batchSize` live records whose retention has passed (`completed`,
   * `resumable` or `released`), never a `processing` claim inside its lease (dropping their
   * bodies and step results, keeping status, fingerprint, timestamps and step names). Returns how many were archived;
   * call again until it returns less than `batchSize`.
   */
  sweep(options?: { batchSize?: number }): Promise<{ archived: number }>;

  /** R3: physically deletes archived records archived more than `olderThanMs` ago. */
  purge(options: { olderThanMs: number }): Promise<{ deleted: number }>;

  /** Resolves when the store is reachable (health checks). */
  ping(): Promise<void>;
}
