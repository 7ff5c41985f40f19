import { randomUUID } from 'node:crypto';
import { atomicModeOf } from './atomic-mode.js';
import { deriveKey, type ClaimContext } from './claim.js';
import {
  FingerprintMismatchError,
  KeyExpiredError,
  RequestInProgressError,
  StoreConfigurationError,
  StoreUnavailableError,
  DEFAULT_DOCUMENTATION_URL,
} from './errors.js';
import { keepLease, neverAborted } from './lease.js';
import type { KeyedIdempotencyEvent, IdempotencyEventHandler, ExpiredGeneration, StoreOperation } from './events.js';
import {
  OutcomeNotStoredError,
  OutcomeTooLargeError,
  defaultErrorCodec,
  deserializeValue,
  outcomeWithErrors,
  serializeValue,
  type ErrorCodec,
  type OutcomeSerializer,
  type StoredErrorDescription,
} from './outcome.js';
import type {
  ClaimOwner,
  ClaimResult,
  IdempotencyRecord,
  IdempotencyStore,
  StoreTransaction,
  StoredOutcome,
  TransactionEnd,
} from './store.js';
import { formatDuration, toMilliseconds, type Duration } from './duration.js';
import { assertScopeFits, scopeParts } from './scope.js';

export { formatScope } from './scope.js';

/** Retention and lease rules of one endpoint; every field falls back to the engine's. */
export interface EndpointPolicy {
  /**
   * R1: how long an outcome is kept and replayed, counted from its completion. A claim still
   * running inside its lease never expires, whatever the retention; a retention shorter than the
   * lease is warned about (`IDEM_RETENTION_BELOW_LEASE`). Defaults to 24 hours (Stripe v1).
   */
  retention?: Duration;
  /**
   * E6: how long a `processing` claim belongs to its owner without a renewal. While the handler
   * runs, the engine renews the lease every third of it, so a slow handler keeps its claim however
   * long it runs; only a claim whose owner stopped renewing (the process died, lost its store, or
   * its event loop stalled past the lease) is taken over by the next request with the same key
   * and payload (the `staleTakeover` event), and the first handler's `claim.signal` aborts. It
   * bounds how long a crashed owner's key stays in progress. Defaults to 30 seconds.
   */
  lease?: Duration;
  /**
   * E3w: how long a duplicate that finds the key in progress waits for the outcome before it
   * answers 409. It polls the store with back-off and holds no connection while it sleeps; when
   * the first execution completes (or fails and its failure is stored) the duplicate answers that
   * outcome as a replay (E2); when its claim is released or taken over, the duplicate claims it
   * and runs. Each waiting duplicate is counted in its generation's `waits` (the key's timeline,
   * A1). Published in the policy (R4) as `waitMs`. Not with atomic mode, where a claim is
   * invisible until its transaction commits. Defaults to 0: answer 409 at once (E3).
   */
  wait?: Duration;
  /**
   * R2: what a reuse of a key whose retention has passed does. `'execute'` runs it as new
   * and emits `expiredKeyReused`; `'reject'` answers 422 `idempotency_key_expired`.
   * Defaults to `'execute'` (the draft allows reuse after expiry).
   */
  expiredReuse?: 'execute' | 'reject';
}

export interface EngineOptions<TTx = unknown> extends EndpointPolicy {
  /** Where records live. Its transaction type, if it has atomic mode, is what `claim.tx` holds. */
  store: IdempotencyStore<TTx>;
  /** Serializer for stored success values: `JSON` (default) or anything with `stringify`/`parse`, such as `superjson`. */
  serializer?: OutcomeSerializer;
  /**
   * One hook for every event (claimed, replayed, conflict, …). Several: `combineEventHandlers`;
   * OpenTelemetry metrics and span attributes: `idempotencyTelemetry()` from `@idem/core/otel`.
   * Defaults to none.
   */
  onEvent?: IdempotencyEventHandler;
  /** The `type` of problem bodies: the published policy (R4). Defaults to `'/idempotency'`. */
  documentationUrl?: string;
  /** `Retry-After` seconds on 409. Capped by the lease's remaining time, at least 1. Defaults to 1. */
  conflictRetryAfter?: number;
  /** `Retry-After` seconds on 503. Defaults to 2. */
  unavailableRetryAfter?: number;
  /**
   * The largest serialized outcome stored, in bytes (UTF-8). A larger one is not stored: the
   * client that ran the handler still gets its real outcome, and every replay gets a 500
   * `INTERNAL_SERVER_ERROR` whose message says the request *was* executed, with which outcome
   * kind and status, and that its result is too large to replay — so a retry never executes
   * twice and never pretends nothing happened. Defaults to 1 MiB.
   */
  maxStoredBytes?: number;
}

export interface ExecuteRequest extends EndpointPolicy {
  /**
   * The record's scope; build it with `formatScope(operation, principal)` (S1). At most
   * `MAX_SCOPE_BYTES` (1,024) bytes in UTF-8: a longer one is refused with 400 `ScopeTooLongError`.
   */
  scope: string;
  /**
   * The scope's operation and principal, as `formatScope` took them, for the events (`operation`,
   * `principal`). The adapters pass them. Without them the engine reads them back from a scope
   * that `formatScope` made; a scope made otherwise is its own operation, with principal `''`.
   * @throws TypeError `[idem] …` when they are given and do not make `scope`.
   */
  operation?: string;
  principal?: string;
  /**
   * An id of this request for the events (`requestId`): one your logs already carry, say.
   * Defaults to a random UUID per call.
   */
  requestId?: string;
  key: string;
  /** The request's fingerprint (see `computeFingerprint`); null for none (F2). */
  fingerprint: string | null;
  /** Overrides the engine's serializer for this endpoint. */
  serializer?: OutcomeSerializer;
  /** How this endpoint's errors are stored and rebuilt. Defaults to {@link defaultErrorCodec}. */
  errors?: ErrorCodec;
  /**
   * The status a success value is stored with, for values that carry their own (an HTTP
   * response, `@idem/fetch`): the record, its events and its timeline show it (A1). Defaults to
   * 200 for every success value.
   */
  statusOf?: (value: unknown) => number;
}

/** The claim an atomic handler runs under: its `tx` is the store's transaction. */
export type AtomicClaimContext<TTx> = ClaimContext<TTx> & { tx: TTx };

/** The outcome the client gets: a value or an error, and whether it was replayed (E2). */
export type ExecuteResult<T> =
  | { ok: true; value: T; replayed: boolean; generation: number }
  | { ok: false; error: unknown; replayed: boolean; generation: number };

/**
 * Throw this (wrapping the real error) from a handler whose real work has not started yet —
 * an authorization or rate-limit check, say — or whose side effect you checked did not happen
 * (a write whose connection was lost, and which a lookup by its downstream key does not find),
 * and the engine releases the claim instead of storing the failure (E4), then rethrows `cause`,
 * so the client can retry with the same key. Release only what a retry may run again: a failure
 * released after a side effect did happen runs it twice, unless the effect is deduplicated by
 * `claim.deriveKey(…)`, which a retry after a release gets again.
 */
export class HandlerNotStartedError extends Error {
  constructor(override readonly cause: unknown) {
    super('[idem] the handler did not start', { cause });
    this.name = 'HandlerNotStartedError';
  }
}

export interface IdempotencyEngine<TTx = unknown> {
  /**
   * Runs `handler` at most once per (scope, key) within the retention: claim → run → store
   * the outcome (E1, E4), or replay a stored one (E2). Throws an `IdempotencyError` for 400 (a
   * scope too long to store), 409, 422 and 503; handler failures are returned (`ok: false`), not thrown.
   */
  execute<T>(request: ExecuteRequest, handler: (claim: ClaimContext<TTx>) => Promise<T> | T): Promise<ExecuteResult<T>>;
  /**
   * `execute` in atomic mode: `handler` runs inside the store's transaction, `claim.tx`; its
   * writes through it commit in the same transaction as the claim and the stored outcome. A
   * crash before the commit leaves nothing, so the retry executes cleanly; after it, the retry
   * replays. A handler that throws has its writes rolled back and its error stored (E4). When the
   * transaction fails to commit, nothing happened: 503 `StoreUnavailableError`, and a retry with
   * the same key either executes or replays. Needs a store with atomic mode (`AtomicMode` in
   * `@idem/core/store`).
   * @throws TypeError `[idem] …` when the store has no atomic mode.
   */
  executeAtomic<T>(
    request: ExecuteRequest,
    handler: (claim: AtomicClaimContext<TTx>) => Promise<T> | T,
  ): Promise<ExecuteResult<T>>;
  /** The resolved engine-wide policy, in milliseconds. */
  readonly policy: {
    retentionMs: number;
    leaseMs: number;
    expiredReuse: 'execute' | 'reject';
    /** E3w: how long a duplicate waits for the outcome in progress (`wait`); 0 for not at all. */
    waitMs: number;
    documentationUrl: string;
    /** The largest serialized outcome stored, in bytes (`maxStoredBytes`). */
    maxStoredBytes: number;
  };
  readonly store: IdempotencyStore<TTx>;
  /** Resolves when background retries of outcome writes (E7) have settled. */
  drain(): Promise<void>;
}

const DEFAULT_RETENTION: Duration = '24h';
const DEFAULT_LEASE: Duration = '30s';
const DEFAULT_MAX_STORED_BYTES = 1024 * 1024;

/** The engine over `options.store`; every option but `store` has a default (see {@link EngineOptions}). */
export function createEngine<TTx = unknown>(options: EngineOptions<TTx>): IdempotencyEngine<TTx> {
  return new Engine(options);
}

/** An {@link ExecuteRequest} with the engine's defaults filled in. */
interface Endpoint {
  scope: string;
  key: string;
  /** What every event of this request carries besides its own fields. */
  subject: { scope: string; operation: string; principal: string; key: string; requestId: string };
  fingerprint: string | null;
  serializer: OutcomeSerializer;
  errors: ErrorCodec;
  statusOf: ((value: unknown) => number) | undefined;
  leaseMs: number;
  retentionMs: number;
  expiredReuse: 'execute' | 'reject';
  waitMs: number;
}

type Replayable = IdempotencyRecord & { outcome: StoredOutcome & { body: string } };

class Engine<TTx> implements IdempotencyEngine<TTx> {
  readonly store: IdempotencyStore<TTx>;
  readonly policy: IdempotencyEngine['policy'];
  readonly #serializer: OutcomeSerializer;
  readonly #onEvent: IdempotencyEventHandler | undefined;
  readonly #conflictRetryAfter: number;
  readonly #unavailableRetryAfter: number;
  readonly #misconfigurationsReported = new Set<string>();
  readonly #maxStoredBytes: number;
  /** Outcome writes being retried in the background (E7). */
  readonly #pending = new Set<Promise<void>>();

  constructor(options: EngineOptions<TTx>) {
    const {
      store,
      serializer = JSON,
      onEvent,
      documentationUrl = DEFAULT_DOCUMENTATION_URL,
      retention = DEFAULT_RETENTION,
      lease = DEFAULT_LEASE,
      wait = 0,
      expiredReuse = 'execute',
      conflictRetryAfter = 1,
      unavailableRetryAfter = 2,
      maxStoredBytes = DEFAULT_MAX_STORED_BYTES,
    } = options;
    this.store = store;
    this.policy = {
      retentionMs: toMilliseconds(retention),
      leaseMs: toMilliseconds(lease),
      expiredReuse,
      waitMs: waitMilliseconds(wait),
      documentationUrl,
      maxStoredBytes,
    };
    this.#serializer = serializer;
    this.#onEvent = onEvent;
    this.#conflictRetryAfter = conflictRetryAfter;
    this.#unavailableRetryAfter = unavailableRetryAfter;
    this.#maxStoredBytes = maxStoredBytes;
    warnIfRetentionBelowLease(this.policy.retentionMs, this.policy.leaseMs);
  }

  async drain(): Promise<void> {
    while (this.#pending.size > 0) await Promise.allSettled([...this.#pending]);
  }

  async execute<T>(
    request: ExecuteRequest,
    handler: (claim: ClaimContext<TTx>) => Promise<T> | T,
  ): Promise<ExecuteResult<T>> {
    const endpoint = this.#endpoint(request);
    let claim = await this.#claim(endpoint);
    if (claim.outcome === 'existing' && endpoint.waitMs > 0 && isAwaitable(endpoint, claim))
      claim = await this.#wait(endpoint, claim);
    if (claim.outcome === 'existing') return this.#answerExisting(endpoint, claim);
    this.#announce(endpoint, claim);

    const { record } = claim;
    const { subject } = endpoint;
    const { generation } = record;
    // E6: renewed while the handler runs, so that only a dead or stalled owner is taken over.
    const lease = keepLease({
      store: this.store,
      owner: ownerOf(endpoint, record),
      leaseMs: endpoint.leaseMs,
      onLost: (error) => this.#emit({ type: 'leaseLost', ...subject, generation, reason: error.reason }),
      onRenewError: (error) =>
        this.#emit({ type: 'storeError', ...subject, storeOperation: 'renew', generation, error, willRetry: true }),
    });
    let run: HandlerRun<T>;
    try {
      run = await runHandler(() => handler(claimContext(endpoint, record, lease.signal)));
    } finally {
      lease.stop();
    }
    if (!run.started) {
      await this.#release(endpoint, record);
      throw run.cause;
    }
    const { result, durationMs } = run;
    const outcome = this.#outcomeOf(endpoint, result);
    const leaseUntil = Math.max(record.leaseUntil.getTime(), lease.renewedAt + endpoint.leaseMs);
    await this.#storeOutcome(
      endpoint,
      { ...record, leaseUntil: new Date(leaseUntil) },
      outcome,
      this.#withErrors(endpoint, outcome, result),
      durationMs,
    );
    return { ...result, replayed: false, generation };
  }

  /**
   * E3w: a duplicate of an execution in progress asks the store again, with back-off, until the
   * outcome is stored (then replayed), the claim is free (then this request claims it), or
   * `waitMs` passes (then 409). Nothing is held between two asks.
   */
  async #wait(endpoint: Endpoint, first: Extract<ClaimResult, { outcome: 'existing' }>): Promise<ClaimResult> {
    const start = Date.now();
    const deadline = start + endpoint.waitMs;
    // A1: counted once, as the wait begins; settled before this waiter asks again, so that it
    // never holds two connections. A failed count is reported and the wait goes on.
    const counted = this.#countWait(endpoint, first.record.generation);
    let claim: ClaimResult = first;
    let delay = FIRST_WAIT_POLL_MS;
    while (claim.outcome === 'existing' && isAwaitable(endpoint, claim) && Date.now() < deadline) {
      await sleep(Math.min(delay, deadline - Date.now()));
      await counted;
      delay = Math.min(delay * 2, MAX_WAIT_POLL_MS);
      claim = await this.#claim(endpoint);
    }
    await counted;
    const answer =
      claim.outcome === 'claimed' ? 'claimed' : isReplayable(claim.record) ? 'replayed' : ('conflict' as const);
    this.#emit({
      type: 'waited',
      ...endpoint.subject,
      generation: claim.record.generation,
      waitedMs: Date.now() - start,
      answer,
    });
    return claim;
  }

  /** E3w, A1: `store.countWait` of the generation a duplicate waits on; never rejects (a failure is a `storeError`). */
  async #countWait({ scope, key, subject }: Endpoint, generation: number): Promise<void> {
    try {
      await this.store.countWait({ scope, key, generation });
    } catch (error) {
      this.#emit({ type: 'storeError', ...subject, storeOperation: 'countWait', generation, error, willRetry: false });
    }
  }

  async executeAtomic<T>(
    request: ExecuteRequest,
    handler: (claim: AtomicClaimContext<TTx>) => Promise<T> | T,
  ): Promise<ExecuteResult<T>> {
    const { transaction } = atomicModeOf(this.store, { asking: 'executeAtomic', otherwise: 'use `execute`' });
    const endpoint = this.#endpoint(request);
    if (endpoint.waitMs > 0)
      throw new TypeError(
        '[idem] `wait` cannot be combined with atomic mode: a claim there is invisible until its transaction commits, so a duplicate has no outcome in progress to wait for (E3w)',
      );

    // E1: a new key is claimed inside the transaction its handler runs in, so nothing of it is
    // visible, and nothing stays after a crash, before the commit.
    let fresh: TransactionClaimed<T> | { outcome: 'exists' | 'inProgress' };
    try {
      fresh = await transaction<typeof fresh>(async (t) => {
        const claim = await t.insertClaim(claimRequest(endpoint));
        if (claim.outcome !== 'claimed') return { commit: false, value: claim };
        const run = await this.#runInTransaction(endpoint, t, claim.record, handler);
        return { commit: run.commit, value: { outcome: 'claimed', record: claim.record, run: run.value } };
      });
    } catch (error) {
      throw this.#unavailable(endpoint, 'claim', null, error);
    }
    if (fresh.outcome === 'claimed') {
      if (fresh.run.outcome === 'completed')
        this.#emit({ type: 'claimed', ...endpoint.subject, generation: fresh.record.generation });
      return this.#afterTransaction(endpoint, fresh.record, fresh.run);
    }
    // Another transaction is running this key's handler; its claim is not visible before it
    // commits, so there is no record to read: 409 at once (E3), nothing held meanwhile.
    if (fresh.outcome === 'inProgress') throw this.#conflict(endpoint, null, this.#conflictRetryAfter);

    // The key has a record: the rules of `execute`, then the handler in a transaction of its own
    // that first locks the claim (E6: only while this execution still owns it).
    const claim = await this.#claim(endpoint);
    if (claim.outcome === 'existing') return this.#answerExisting(endpoint, claim);
    this.#announce(endpoint, claim);
    const { record } = claim;
    let run: AtomicRun<T>;
    try {
      run = await transaction<AtomicRun<T>>(async (t) => {
        const owned = await t.lockOwned(ownerOf(endpoint, record));
        if (!owned) return { commit: false, value: { outcome: 'fenced' } };
        return this.#runInTransaction(endpoint, t, owned, handler);
      });
    } catch (error) {
      // Nothing was committed: give the claim back so that a retry runs at once (E4).
      await this.#release(endpoint, record);
      throw this.#unavailable(endpoint, 'complete', record.generation, error);
    }
    if (run.outcome === 'notStarted' || run.outcome === 'unstorable') await this.#release(endpoint, record);
    return this.#afterTransaction(endpoint, record, run);
  }

  /**
   * The handler on a savepoint of the open transaction, then its outcome stored there, in the
   * transaction's end: committed once the outcome is stored; rolled back — the handler's writes
   * with it — when the handler did not start (E4), when its outcome cannot be described, or when
   * the claim is no longer this execution's (E6).
   */
  async #runInTransaction<T>(
    endpoint: Endpoint,
    t: StoreTransaction<TTx>,
    record: IdempotencyRecord,
    handler: (claim: AtomicClaimContext<TTx>) => Promise<T> | T,
  ): Promise<TransactionEnd<AtomicRun<T>>> {
    // The handler's own time, inside the savepoint: without the savepoint's statements.
    let durationMs = 0;
    // What the handler itself threw, to tell its failure from the savepoint's own statements'.
    let thrown: { error: unknown } | undefined;
    let returned = false;
    const run = await runHandler(() =>
      t.savepoint(async (tx) => {
        const start = performance.now();
        try {
          // The open transaction holds the claim (E6): nothing can take it over before it ends.
          const value = await handler({ ...claimContext(endpoint, record, neverAborted()), tx });
          returned = true;
          return value;
        } catch (error) {
          thrown = { error };
          throw error;
        } finally {
          durationMs = performance.now() - start;
        }
      }),
    );
    // `SAVEPOINT`, `RELEASE` or `ROLLBACK TO` failed (a lost connection, a transaction the database
    // aborted): not the handler's outcome, and nothing of it may be stored or shown. The
    // transaction failed: it rolls back, and the client is answered 503 (E5).
    const handlerError = thrown?.error;
    if (run.started && !run.result.ok && (returned || thrown === undefined || run.result.error !== handlerError))
      throw run.result.error;
    if (!run.started) return { commit: false, value: { outcome: 'notStarted', cause: run.cause } };
    let stored: StoredOutcome;
    try {
      stored = this.#outcomeOf(endpoint, run.result);
    } catch (error) {
      return { commit: false, value: { outcome: 'unstorable', error } };
    }
    if (!(await t.complete({ ...ownerOf(endpoint, record), outcome: stored })))
      return { commit: false, value: { outcome: 'fenced' } };
    return { commit: true, value: { outcome: 'completed', result: run.result, stored, durationMs } };
  }

  /** What the client gets once an atomic execution's transaction has ended. */
  async #afterTransaction<T>(
    endpoint: Endpoint,
    record: IdempotencyRecord,
    run: AtomicRun<T>,
  ): Promise<ExecuteResult<T>> {
    const { scope, key, subject } = endpoint;
    const { generation } = record;
    switch (run.outcome) {
      case 'completed': {
        const { status, kind } = run.stored;
        const withErrors = this.#withErrors(endpoint, run.stored, run.result);
        const { durationMs } = run;
        this.#emit({ type: 'completed', ...subject, generation, status, outcomeKind: kind, withErrors, durationMs });
        return { ...run.result, replayed: false, generation };
      }
      case 'notStarted':
        throw run.cause;
      case 'unstorable':
        throw run.error;
      case 'fenced': {
        // E6: the new owner's stored outcome is the answer, or it is still running.
        this.#emit({ type: 'fenced', ...subject, generation });
        let current;
        try {
          current = await this.store.get(scope, key);
        } catch (error) {
          throw this.#unavailable(endpoint, 'claim', generation, error);
        }
        if (current && isReplayable(current)) return this.#replay(endpoint, current);
        throw this.#conflict(endpoint, current?.generation ?? null, this.#conflictRetryAfter);
      }
    }
  }

  /** @throws ScopeTooLongError (400) before anything is claimed, for a scope no store can key (S1). */
  #endpoint(request: ExecuteRequest): Endpoint {
    const { key, fingerprint, lease, retention, wait } = request;
    const scope = assertScopeFits(request.scope);
    const { operation, principal } = scopeParts(request);
    const requestId = request.requestId ?? randomUUID();
    const leaseMs = lease === undefined ? this.policy.leaseMs : toMilliseconds(lease);
    const retentionMs = retention === undefined ? this.policy.retentionMs : toMilliseconds(retention);
    if (lease !== undefined || retention !== undefined) warnIfRetentionBelowLease(retentionMs, leaseMs);
    return {
      scope,
      key,
      subject: { scope, operation, principal, key, requestId },
      fingerprint,
      serializer: request.serializer ?? this.#serializer,
      errors: request.errors ?? defaultErrorCodec,
      statusOf: request.statusOf,
      leaseMs,
      retentionMs,
      expiredReuse: request.expiredReuse ?? this.policy.expiredReuse,
      waitMs: wait === undefined ? this.policy.waitMs : waitMilliseconds(wait),
    };
  }

  /** E1: claims the key, or reads its live record. A store that fails answers 503 (E5). */
  async #claim(endpoint: Endpoint): Promise<ClaimResult> {
    try {
      return await this.store.claim(claimRequest(endpoint));
    } catch (error) {
      throw this.#unavailable(endpoint, 'claim', null, error);
    }
  }

  /** The key already has a live record: 422 (expired with `reject`, or another payload), a replay, or 409. */
  #answerExisting<T>(
    endpoint: Endpoint,
    { record, now, expired }: Extract<ClaimResult, { outcome: 'existing' }>,
  ): ExecuteResult<T> {
    const { subject, fingerprint } = endpoint;
    if (expired) {
      const previous = describeGeneration(record);
      this.#emit({ type: 'expiredKeyRejected', ...subject, previous });
      throw new KeyExpiredError({
        firstSeenAt: record.createdAt,
        completedAt: record.completedAt,
        expiresAt: record.expiresAt,
        status: previous.status,
      });
    }
    if (record.fingerprint !== null && fingerprint !== null && record.fingerprint !== fingerprint) {
      this.#emit({ type: 'mismatch', ...subject, generation: record.generation });
      throw new FingerprintMismatchError();
    }
    if (isReplayable(record)) return this.#replay(endpoint, record);
    const leaseLeft = Math.ceil((record.leaseUntil.getTime() - now.getTime()) / 1000);
    throw this.#conflict(endpoint, record.generation, Math.min(this.#conflictRetryAfter, leaseLeft));
  }

  /** E2: the stored outcome, as the handler's result. */
  #replay<T>({ subject, serializer, errors }: Endpoint, record: Replayable): ExecuteResult<T> {
    const { kind, status, body } = record.outcome;
    const { generation } = record;
    if (kind === 'success') {
      const value = deserializeValue(serializer, body) as T;
      const withErrors = outcomeWithErrors(serializer, kind, value);
      this.#emit({ type: 'replayed', ...subject, generation, status, withErrors });
      return { ok: true, value, replayed: true, generation };
    }
    this.#emit({ type: 'replayed', ...subject, generation, status, withErrors: true });
    return { ok: false, error: errors.revive(JSON.parse(body) as StoredErrorDescription), replayed: true, generation };
  }

  #announce({ subject }: Endpoint, claim: Extract<ClaimResult, { outcome: 'claimed' }>): void {
    const { record, expired, takeover } = claim;
    const { generation } = record;
    if (expired)
      this.#emit({ type: 'expiredKeyReused', ...subject, generation, previous: describeGeneration(expired) });
    if (takeover)
      this.#emit({
        type: 'staleTakeover',
        ...subject,
        generation,
        previousLeaseUntil: takeover.previousLeaseUntil,
        takeovers: record.takeovers,
      });
    this.#emit({ type: 'claimed', ...subject, generation });
  }

  /** Whether a stored outcome is a failure for an operator (the `withErrors` of `completed`). */
  #withErrors({ serializer }: Endpoint, outcome: StoredOutcome, result: HandlerResult<unknown>): boolean {
    return outcomeWithErrors(serializer, outcome.kind, result.ok ? result.value : undefined);
  }

  /** What is stored of a handler's result: serialized, error described, size bounded. */
  #outcomeOf({ serializer, errors, statusOf }: Endpoint, result: HandlerResult<unknown>): StoredOutcome {
    const max = this.#maxStoredBytes;
    try {
      return boundedOutcome(toStoredOutcome(result, serializer, errors, statusOf), max, errors);
    } catch (error) {
      if (!(error instanceof OutcomeTooLargeError)) throw error;
      return tooLargeOutcome(errors, 'success', error.status, error.bytes, max, true);
    }
  }

  /** E4, E7: stores the outcome; when the write fails, retries it in the background until the lease ends. */
  async #storeOutcome(
    { scope, key, subject }: Endpoint,
    record: IdempotencyRecord,
    outcome: StoredOutcome,
    withErrors: boolean,
    durationMs: number,
  ): Promise<void> {
    const { token, generation } = record;
    const attempt = async () => {
      const owned = await this.store.complete({ scope, key, token, outcome });
      if (owned)
        this.#emit({
          type: 'completed',
          ...subject,
          generation,
          status: outcome.status,
          outcomeKind: outcome.kind,
          withErrors,
          durationMs,
        });
      else this.#emit({ type: 'fenced', ...subject, generation });
    };
    try {
      await attempt();
    } catch (error) {
      // The client gets its real outcome now; until the lease ends no one else can take the claim over.
      const deadline = record.leaseUntil.getTime();
      const failed = { type: 'storeError', ...subject, storeOperation: 'complete', generation } as const;
      this.#emit({ ...failed, error, willRetry: Date.now() < deadline });
      const retry = retryUntil(deadline, attempt, (retryError, willRetry) =>
        this.#emit({ ...failed, error: retryError, willRetry }),
      );
      this.#pending.add(retry);
      void retry.finally(() => this.#pending.delete(retry));
    }
  }

  /** E4: gives back a claim whose handler did not start. */
  async #release({ scope, key, subject }: Endpoint, record: IdempotencyRecord): Promise<void> {
    const { generation } = record;
    try {
      if (await this.store.release({ scope, key, token: record.token }))
        this.#emit({ type: 'released', ...subject, generation });
    } catch (error) {
      // The claim then stays until its lease passes, and a retry takes it over (E6).
      this.#emit({ type: 'storeError', ...subject, storeOperation: 'release', generation, error, willRetry: false });
    }
  }

  /** E3: 409 with `Retry-After` (at least 1 second); `generation`: the one still running, when known. */
  #conflict({ subject }: Endpoint, generation: number | null, seconds: number): RequestInProgressError {
    const retryAfter = Math.max(1, seconds);
    this.#emit({ type: 'conflict', ...subject, generation, retryAfter });
    return new RequestInProgressError(retryAfter);
  }

  /** E5: the store failed: 503 with `Retry-After`; `generation`: the one this request claimed, if any. */
  #unavailable(
    { subject }: Endpoint,
    storeOperation: Exclude<StoreOperation, 'release'>,
    generation: number | null,
    error: unknown,
  ): StoreUnavailableError {
    this.#emit({ type: 'storeError', ...subject, storeOperation, generation, error, willRetry: false });
    if (error instanceof StoreConfigurationError) this.#reportMisconfiguration(error);
    return new StoreUnavailableError(this.#unavailableRetryAfter, error);
  }

  /** A misconfigured store fails every request the same way: say so once, loudly, not once per request. */
  #reportMisconfiguration(error: StoreConfigurationError): void {
    if (this.#misconfigurationsReported.has(error.message)) return;
    this.#misconfigurationsReported.add(error.message);
    console.error(error.message.startsWith('[idem]') ? error.message : `[idem] ${error.message}`);
  }

  #emit(event: KeyedIdempotencyEvent): void {
    if (!this.#onEvent) return;
    try {
      this.#onEvent(event);
    } catch {
      // A logging hook must never change the outcome of a request.
    }
  }
}

function claimRequest({ scope, key, fingerprint, leaseMs, retentionMs, expiredReuse }: Endpoint) {
  return { scope, key, fingerprint, token: randomUUID(), leaseMs, retentionMs, expiredReuse };
}

function claimContext<TTx>(
  { scope, key }: Endpoint,
  { generation, token }: IdempotencyRecord,
  signal: AbortSignal,
): ClaimContext<TTx> {
  return { scope, key, generation, token, signal, deriveKey: (label) => deriveKey({ scope, key, generation }, label) };
}

/** E3w: the back-off of a waiting duplicate: its first ask again, and the longest pause between two. */
const FIRST_WAIT_POLL_MS = 25;
const MAX_WAIT_POLL_MS = 500;

/** E3w: `wait` in milliseconds; 0 (or `'0s'`…) for no wait. */
function waitMilliseconds(wait: Duration): number {
  return wait === 0 || (typeof wait === 'string' && /^\s*0+(\.0+)?\s*(ms|s|m|h|d)\s*$/.test(wait))
    ? 0
    : toMilliseconds(wait);
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
}

/**
 * E3w: whether a duplicate may wait on what it found: a claim in progress for the same payload.
 * Not an expired key (R2), another payload (F3), or a stored outcome (E2): those answer at once.
 */
function isAwaitable(
  { fingerprint }: Endpoint,
  { record, expired }: Extract<ClaimResult, { outcome: 'existing' }>,
): boolean {
  if (expired || record.state !== 'processing') return false;
  return record.fingerprint === null || fingerprint === null || record.fingerprint === fingerprint;
}

function ownerOf({ scope, key }: Endpoint, { token }: IdempotencyRecord): ClaimOwner {
  return { scope, key, token };
}

/** What a handler did: returned a value or threw. */
type HandlerResult<T> = { ok: true; value: T } | { ok: false; error: unknown };

/**
 * E4, "the handler started": a run of the handler, unless it threw a `HandlerNotStartedError`,
 * which says that its real work never began (its claim is then given back, nothing stored).
 */
type HandlerRun<T> = { durationMs: number } & (
  | { started: true; result: HandlerResult<T> }
  | { started: false; cause: unknown }
);

/** Runs `run` and times it: from its call until its promise settles (the `durationMs` of `completed`). */
async function runHandler<T>(run: () => Promise<T> | T): Promise<HandlerRun<T>> {
  const start = performance.now();
  try {
    const value = await run();
    return { started: true, result: { ok: true, value }, durationMs: performance.now() - start };
  } catch (error) {
    const durationMs = performance.now() - start;
    if (error instanceof HandlerNotStartedError) return { started: false, cause: error.cause, durationMs };
    return { started: true, result: { ok: false, error }, durationMs };
  }
}

/**
 * How an atomic execution's transaction ended: `completed` was committed with its outcome; the
 * others were rolled back, the handler's writes with them.
 */
type AtomicRun<T> =
  | { outcome: 'completed'; result: HandlerResult<T>; stored: StoredOutcome; durationMs: number }
  | { outcome: 'notStarted'; cause: unknown }
  | { outcome: 'unstorable'; error: unknown }
  | { outcome: 'fenced' };

/** A new key claimed inside the transaction, and how that transaction ended. */
type TransactionClaimed<T> = { outcome: 'claimed'; record: IdempotencyRecord; run: AtomicRun<T> };

/** Each distinct warning once per process: a per-request policy must not warn on every request. */
const warned = new Set<string>();

/**
 * R1: a claim inside its lease never expires, so with a retention shorter than the lease a key
 * can stay claimed (409) for longer than the retention the policy publishes, and clients that
 * bound their retries by it give up too early. Legal, but rarely meant: warned once.
 */
function warnIfRetentionBelowLease(retentionMs: number, leaseMs: number): void {
  if (retentionMs >= leaseMs) return;
  const message = `[idem] the retention (${formatDuration(retentionMs)}) is shorter than the lease (${formatDuration(leaseMs)}): a claim inside its lease never expires, so a key can stay claimed longer than the retention clients are told to retry within. Set the retention above the lease.`;
  if (warned.has(message)) return;
  warned.add(message);
  process.emitWarning(message, { code: 'IDEM_RETENTION_BELOW_LEASE' });
}

function toStoredOutcome<T>(
  result: HandlerResult<T>,
  serializer: OutcomeSerializer,
  errors: ErrorCodec,
  statusOf: ((value: unknown) => number) | undefined,
): StoredOutcome {
  if (result.ok) {
    const status = statusOf ? statusOf(result.value) : 200;
    try {
      return { kind: 'success', status, body: serializeValue(serializer, result.value) };
    } catch (error) {
      if (error instanceof OutcomeTooLargeError) throw error;
      // E4: the handler ran, so something must be stored; a value the serializer cannot
      // write is replayed as a 500 naming the cause rather than executed twice.
      const reason = error instanceof Error ? error.message : String(error);
      return describedError(
        errors,
        new OutcomeNotStoredError(
          `[idem] this request was executed (outcome: success, status ${status}), but its result could not be serialized for replay (${reason}). Do not retry it: look the result up instead.`,
          { executed: true, reason: 'unserializable', outcomeKind: 'success', status },
        ),
      );
    }
  }
  return describedError(errors, result.error);
}

function describedError(errors: ErrorCodec, error: unknown): StoredOutcome {
  const description = errors.describe(error);
  return { kind: 'error', status: description.status, body: JSON.stringify(description) };
}

/** An outcome whose body is over the limit becomes a 500 that tells what happened (see `maxStoredBytes`). */
function boundedOutcome(outcome: StoredOutcome, maxStoredBytes: number, errors: ErrorCodec): StoredOutcome {
  const size = outcome.body === null ? 0 : Buffer.byteLength(outcome.body, 'utf8');
  if (size <= maxStoredBytes) return outcome;
  return tooLargeOutcome(errors, outcome.kind, outcome.status, size, maxStoredBytes, false);
}

/** The 500 stored for an outcome over `maxStoredBytes`; `atLeast`: `bytes` is what was seen of a larger one. */
function tooLargeOutcome(
  errors: ErrorCodec,
  kind: StoredOutcome['kind'],
  status: number,
  bytes: number,
  maxStoredBytes: number,
  atLeast: boolean,
): StoredOutcome {
  const size = atLeast ? `at least ${bytes} bytes` : `${bytes} bytes`;
  return describedError(
    errors,
    new OutcomeNotStoredError(
      `[idem] this request was executed (outcome: ${kind}, status ${status}), but its result (${size}) is larger than the ${maxStoredBytes} bytes idem stores, so it cannot be replayed. Do not retry it: look the result up instead.`,
      { executed: true, reason: 'too_large', outcomeKind: kind, status, bytes, maxStoredBytes },
    ),
  );
}

function isReplayable(record: IdempotencyRecord): record is Replayable {
  return record.state === 'completed' && record.outcome !== null && record.outcome.body !== null;
}

function describeGeneration(record: IdempotencyRecord): ExpiredGeneration {
  return {
    generation: record.generation,
    state: record.state,
    firstSeenAt: record.createdAt,
    completedAt: record.completedAt,
    expiresAt: record.expiresAt,
    archivedAt: record.archivedAt,
    status: record.outcome?.status ?? null,
    outcomeKind: record.outcome?.kind ?? null,
  };
}

async function retryUntil(
  deadline: number,
  attempt: () => Promise<void>,
  onError: (error: unknown, willRetry: boolean) => void,
): Promise<void> {
  // Back off, but never past the lease: the last attempt lands just before it ends (E7).
  const lastCall = deadline - 25;
  let delay = 50;
  for (;;) {
    const wait = Math.min(delay, lastCall - Date.now());
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait).unref?.());
    try {
      await attempt();
      return;
    } catch (error) {
      delay = Math.min(delay * 2, 2000);
      const willRetry = Date.now() < lastCall;
      onError(error, willRetry);
      if (!willRetry) return;
    }
  }
}
