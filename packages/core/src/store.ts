/**
 * The store contract. A store keeps one live record per (scope, key) and the earlier
 * generations of that key as history. Everything that must be atomic happens inside
 * `claim`, `complete` and `release`; the engine holds no state of its own.
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
 */
export type RecordState = 'processing' | 'completed' | 'released' | 'archived';

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
  outcome: StoredOutcome | null;
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
  takeovers: number;
}

/** What a handler run inside a store transaction did: returned a value or threw. */
export type AtomicResult<T> = { ok: true; value: T } | { ok: false; error: unknown };

/**
 * Atomic mode, an optional capability (`engine.executeAtomic`): the handler runs inside the
 * store's database transaction and gets its handle, so that its own writes commit together
 * with the claim and the stored outcome, or not at all. A crash before the commit leaves
 * nothing: the retry executes cleanly. `MemoryStore` has no atomic mode; `@idem/drizzle`
 * implements it on PostgreSQL and SQLite.
 *
 * In both methods `run` is called at most once, on a savepoint: when it throws, its writes are
 * rolled back to the savepoint and the error is kept as its result (E4: stored). `toOutcome`
 * turns the result into the outcome stored in the same transaction; when it throws, the whole
 * transaction is rolled back and the method rejects with its error. Any other rejection means
 * the transaction did not commit (the backend failed).
 */
export interface AtomicMode<TTx = unknown> {
  /**
   * `'synchronous'`: `run` must return its value, not a promise (better-sqlite3, whose
   * transactions cannot span an `await`); a thenable is refused with a `TypeError` and the
   * transaction rolled back. `'asynchronous'`: `run` may await (PostgreSQL).
   */
  readonly atomicHandlers: 'synchronous' | 'asynchronous';

  /**
   * Rule 1 of `claim` and the whole execution, in one transaction: inserts the claim
   * (`INSERT … ON CONFLICT DO NOTHING`); when (scope, key) already has a record, rolls back and
   * answers `{ executed: false }` (the engine then takes the normal `claim` path). When another
   * transaction is claiming the same key at this moment (its claim not committed yet), answers
   * `{ executed: false, inProgress: true }` at once instead of waiting for that transaction — a
   * duplicate must not hold a connection for as long as the first handler runs — and the engine
   * answers 409. Otherwise runs
   * `run(tx, record)`, stores `toOutcome(result)` as with `complete`, and commits.
   * `record` is the claim the handler ran under, as claimed.
   */
  atomicClaim<T>(
    request: ClaimRequest,
    run: (tx: TTx, record: IdempotencyRecord) => T | Promise<T>,
    toOutcome: (result: AtomicResult<T>) => StoredOutcome,
  ): Promise<
    { executed: true; record: IdempotencyRecord; result: AtomicResult<T> } | { executed: false; inProgress?: true }
  >;

  /**
   * For a claim already held by `token` (taken over, reclaimed after a release, a reuse after
   * expiry): in one transaction, locks the record if `token` still owns it `processing`, runs
   * `run(tx, record)` and stores `toOutcome(result)`. When `token` no longer owns the record
   * (fenced out, E6), rolls everything back — the handler's writes too — and answers
   * `{ completed: false }`; the handler may then not have run at all.
   */
  atomicComplete<T>(
    args: { scope: string; key: string; token: string },
    run: (tx: TTx, record: IdempotencyRecord) => T | Promise<T>,
    toOutcome: (result: AtomicResult<T>) => StoredOutcome,
  ): Promise<{ completed: true; record: IdempotencyRecord; result: AtomicResult<T> } | { completed: false }>;
}

/**
 * The contract every store implements. All methods may reject when the backend is
 * unreachable; the engine turns that into a 503 (E5). The members of {@link AtomicMode} are
 * optional: a store has all of them or none. `TTx` is the type of the transaction atomic mode
 * hands the handler (`claim.tx`); `unknown` for a store without atomic mode.
 */
export interface IdempotencyStore<TTx = unknown> extends Partial<AtomicMode<TTx>> {
  /**
   * Atomically claims (scope, key) — exactly one concurrent caller wins (E1) — or answers
   * with the live record. Rules, all evaluated with the store's clock `now`:
   * 1. no live record → insert generation 1, `processing`, lease and retention from now: `claimed`;
   * 2. live record expired (`archived`, or `expiresAt <= now` and not a `processing` claim with
   *    `leaseUntil > now`: a claim inside its lease never expires, R1) → `expiredReuse: 'execute'`: move
   *    it to history (archived, `reusedAt = now`) and claim generation + 1: `claimed` with
   *    `expired`; `'reject'`: `existing` with `expired: true`;
   * 3. `released` → take it over as new (new token, fingerprint, timestamps): `claimed`;
   * 4. `processing`, `leaseUntil <= now`, and fingerprints match (equal, or either is null)
   *    → new token and lease, `takeovers + 1`: `claimed` with `takeover`;
   * 5. otherwise → `existing` (the engine decides: replay, 409 or 422).
   */
  claim(request: ClaimRequest): Promise<ClaimResult>;

  /**
   * Stores the outcome if `token` still owns the `processing` record, with `completedAt = now`
   * and `expiresAt = now + (expiresAt − createdAt)`: retention counts from completion (R1).
   * Returns false when it does not own it (fenced out by a takeover, E6): the record is left untouched.
   */
  complete(args: { scope: string; key: string; token: string; outcome: StoredOutcome }): Promise<boolean>;

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
   * R3: archives up to `batchSize` live records whose retention has passed, never a `processing`
   * claim inside its lease (dropping their
   * bodies, keeping status, fingerprint and timestamps). Returns how many were archived;
   * call again until it returns less than `batchSize`.
   */
  sweep(options?: { batchSize?: number }): Promise<{ archived: number }>;

  /** R3: physically deletes archived records archived more than `olderThanMs` ago. */
  purge(options: { olderThanMs: number }): Promise<{ deleted: number }>;

  /** Resolves when the store is reachable (health checks). */
  ping(): Promise<void>;
}
