import { createHash, randomUUID } from 'node:crypto';
import { formatIdempotencyKey } from './key.js';
import { FingerprintMismatchError, KeyExpiredError, RequestInProgressError, StoreUnavailableError, DEFAULT_DOCUMENTATION_URL } from './errors.js';
import type { IdempotencyEvent, IdempotencyEventHandler, ExpiredGeneration } from './events.js';
import { OutcomeNotStoredError, defaultErrorCodec, deserializeValue, serializeValue, type ErrorCodec, type OutcomeSerializer, type StoredErrorDescription } from './outcome.js';
import type { AtomicMode, AtomicResult, ClaimResult, IdempotencyRecord, IdempotencyStore, StoredOutcome } from './store.js';
import { formatDuration, toMilliseconds, type Duration } from './duration.js';

/** Retention and lease rules of one endpoint; every field falls back to the engine's. */
export interface EndpointPolicy {
  /**
   * R1: how long an outcome is kept and replayed, counted from its completion. A claim still
   * running inside its lease never expires, whatever the retention; a retention shorter than the
   * lease is warned about (`IDEM_RETENTION_BELOW_LEASE`). Defaults to 24 hours (Stripe v1).
   */
  retention?: Duration;
  /**
   * E6: how long a `processing` claim belongs to its owner. Past it, with no outcome stored,
   * the next request with the same key and payload takes over and runs the handler again
   * (the `staleTakeover` event). Set it above your handler's longest run: a handler still
   * running when its lease ends can run twice. Defaults to 30 seconds.
   */
  lease?: Duration;
  /**
   * R2: what a reuse of a key whose retention has passed does. `'execute'` runs it as new
   * and emits `expiredKeyReused`; `'reject'` answers 422 `idempotency_key_expired`.
   * Defaults to `'execute'` (the draft allows reuse after expiry).
   */
  expiredReuse?: 'execute' | 'reject';
}

export interface EngineOptions extends EndpointPolicy {
  /** Where records live. */
  store: IdempotencyStore;
  /** Serializer for stored success values: `JSON` (default) or anything with `stringify`/`parse`, such as `superjson`. */
  serializer?: OutcomeSerializer;
  /** One hook for every event (claimed, replayed, conflict, …). Defaults to none. */
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
  /** The record's scope; build it with `formatScope(operation, principal)` (S1). */
  scope: string;
  key: string;
  /** The request's fingerprint (see `computeFingerprint`); null for none (F2). */
  fingerprint: string | null;
  /** Overrides the engine's serializer for this endpoint. */
  serializer?: OutcomeSerializer;
  /** How this endpoint's errors are stored and rebuilt. Defaults to {@link defaultErrorCodec}. */
  errors?: ErrorCodec;
}

/** What the handler is told about its claim. */
export interface ClaimContext {
  scope: string;
  key: string;
  generation: number;
  /** The fencing token of this execution (E6). */
  token: string;
  /**
   * A key for an outgoing call (a payment channel, another idempotent API), formatted as an
   * RFC 9651 sf-string (`"idem-…"`), ready for an `Idempotency-Key` header. Deterministic in
   * (scope, key, generation, label): a re-execution after a lease takeover (E6) sends the same
   * downstream key, so the provider deduplicates; a reuse after expiry (R2, a new generation)
   * gets a new one, as it is a new request. In a unit of several parts (see {@link part}) it
   * is also distinct for each part.
   */
  deriveKey(label: string): string;
  /**
   * E4: the part of a unit of several parts this handler runs — with a GraphQL header key over
   * several root fields, the root field's response key (alias or name). Keys derived from the
   * claim differ per part, so a downstream provider never deduplicates one part onto another.
   * Undefined when the unit is one part.
   */
  part?: string;
  /**
   * Atomic mode (`executeAtomic`, the adapters' `atomic: true`): the store's database transaction
   * (with `@idem/drizzle`, the Drizzle transaction). Write through it, and your writes commit
   * with the claim and the stored outcome, or not at all. Undefined otherwise.
   */
  tx?: unknown;
}

const CLAIM = Symbol.for('@idem/claim');

/**
 * The claim a request context carries while its handler runs: adapters attach it
 * ({@link withClaim}) and resolvers read it, e.g. `idempotencyClaim(ctx)?.deriveKey('channel')`.
 * Undefined outside an idempotent execution (no key, or a query).
 */
export function idempotencyClaim(context: unknown): ClaimContext | undefined {
  return context !== null && typeof context === 'object' ? ((context as Record<symbol, ClaimContext | undefined>)[CLAIM] ?? undefined) : undefined;
}

/** Context fields to merge into a request context so {@link idempotencyClaim} finds the claim. */
export function claimContextFields(claim: ClaimContext): Record<symbol, ClaimContext> {
  return { [CLAIM]: claim };
}

/**
 * Attaches `claim` to `context` itself (a non-enumerable symbol property, so the object keeps
 * its identity for other plugins) until the returned function detaches it.
 */
export function attachClaim(context: object, claim: ClaimContext): () => void {
  Object.defineProperty(context, CLAIM, { value: claim, enumerable: false, configurable: true, writable: true });
  return () => {
    delete (context as Record<symbol, unknown>)[CLAIM];
  };
}

/** See {@link ClaimContext.deriveKey}. */
export function deriveKey(claim: { scope: string; key: string; generation: number; part?: string | undefined }, label: string): string {
  const parts = [claim.scope, claim.key, claim.generation, label];
  if (claim.part !== undefined) parts.push(claim.part);
  const digest = createHash('sha256').update(JSON.stringify(parts)).digest('base64url');
  return formatIdempotencyKey(`idem-${digest.slice(0, 32)}`);
}

/**
 * E4: the claim as one part of a unit of several parts sees it (an adapter attaches it while
 * that part runs): the same claim and transaction, with keys derived for this part only.
 */
export function claimForPart(claim: ClaimContext, part: string): ClaimContext {
  const { scope, key, generation } = claim;
  return { ...claim, part, deriveKey: (label) => deriveKey({ scope, key, generation, part }, label) };
}

/** The outcome the client gets: a value or an error, and whether it was replayed (E2). */
export type ExecuteResult<T> =
  | { ok: true; value: T; replayed: boolean; generation: number }
  | { ok: false; error: unknown; replayed: boolean; generation: number };

/**
 * Throw this (wrapping the real error) from a handler whose real work has not started yet —
 * an authorization or rate-limit check, say — and the engine releases the claim instead of
 * storing the failure (E4), then rethrows `cause`, so the client can retry with the same key.
 */
export class HandlerNotStartedError extends Error {
  constructor(override readonly cause: unknown) {
    super('[idem] the handler did not start', { cause });
    this.name = 'HandlerNotStartedError';
  }
}

export interface IdempotencyEngine {
  /**
   * Runs `handler` at most once per (scope, key) within the retention: claim → run → store
   * the outcome (E1, E4), or replay a stored one (E2). Throws an `IdempotencyError` for 409,
   * 422 and 503; handler failures are returned (`ok: false`), not thrown.
   */
  execute<T>(request: ExecuteRequest, handler: (claim: ClaimContext) => Promise<T> | T): Promise<ExecuteResult<T>>;
  /**
   * `execute` in atomic mode: `handler` runs inside the store's transaction and gets its handle
   * (`tx`, also `claim.tx`); its writes through `tx` commit in the same transaction as the claim
   * and the stored outcome. A crash before the commit leaves nothing, so the retry executes
   * cleanly; after it, the retry replays. A handler that throws has its writes rolled back and
   * its error stored (E4). When the transaction fails to commit, nothing happened: 503
   * `StoreUnavailableError`, and a retry with the same key either executes or replays.
   * Needs a store with atomic mode (`@idem/drizzle`); on SQLite the handler must be
   * synchronous (better-sqlite3 transactions cannot span an `await`).
   * @throws TypeError `[idem] …` when the store has no atomic mode, or on SQLite for an async handler.
   */
  executeAtomic<T>(request: ExecuteRequest, handler: (tx: unknown, claim: ClaimContext) => Promise<T> | T): Promise<ExecuteResult<T>>;
  /** The resolved engine-wide policy, in milliseconds. */
  readonly policy: { retentionMs: number; leaseMs: number; expiredReuse: 'execute' | 'reject'; documentationUrl: string };
  readonly store: IdempotencyStore;
  /** Resolves when background retries of outcome writes (E7) have settled. */
  drain(): Promise<void>;
}

export const DEFAULT_RETENTION: Duration = '24h';
export const DEFAULT_MAX_STORED_BYTES = 1024 * 1024;
export const DEFAULT_LEASE: Duration = '30s';

/** Builds a scope (S1): `<principal>/<operation>`, the principal percent-encoded. */
export function formatScope(operation: string, principal: string): string {
  return `${encodeURIComponent(principal)}/${operation}`;
}

export function createEngine(options: EngineOptions): IdempotencyEngine {
  const {
    store,
    serializer: defaultSerializer = JSON,
    onEvent,
    documentationUrl = DEFAULT_DOCUMENTATION_URL,
    retention = DEFAULT_RETENTION,
    lease = DEFAULT_LEASE,
    expiredReuse: defaultExpiredReuse = 'execute',
    conflictRetryAfter = 1,
    unavailableRetryAfter = 2,
    maxStoredBytes = DEFAULT_MAX_STORED_BYTES,
  } = options;
  const policy = { retentionMs: toMilliseconds(retention), leaseMs: toMilliseconds(lease), expiredReuse: defaultExpiredReuse, documentationUrl };
  warnIfRetentionBelowLease(policy.retentionMs, policy.leaseMs);
  const pending = new Set<Promise<void>>();

  const emit = (event: IdempotencyEvent) => {
    if (!onEvent) return;
    try {
      onEvent(event);
    } catch {
      // A logging hook must never change the outcome of a request.
    }
  };

  async function storeOutcome(scope: string, key: string, record: IdempotencyRecord, outcome: StoredOutcome): Promise<void> {
    const { token, generation } = record;
    const attempt = async () => {
      const owned = await store.complete({ scope, key, token, outcome });
      if (owned) emit({ type: 'completed', scope, key, generation, status: outcome.status, outcomeKind: outcome.kind });
      else emit({ type: 'fenced', scope, key, generation });
    };
    try {
      await attempt();
    } catch (error) {
      // E7: the client gets its real outcome now; the write is retried until the lease ends,
      // and until then no one else can take the claim over.
      const deadline = record.leaseUntil.getTime();
      emit({ type: 'storeError', scope, key, operation: 'complete', error, willRetry: Date.now() < deadline });
      const retry = retryUntil(deadline, attempt, (retryError, willRetry) =>
        emit({ type: 'storeError', scope, key, operation: 'complete', error: retryError, willRetry }),
      );
      pending.add(retry);
      void retry.finally(() => pending.delete(retry));
    }
  }

  return {
    policy,
    store,
    drain: async () => {
      while (pending.size > 0) await Promise.allSettled([...pending]);
    },
    async execute<T>(request: ExecuteRequest, handler: (claim: ClaimContext) => Promise<T> | T): Promise<ExecuteResult<T>> {
      const endpoint = resolve(request);
      let claim: ClaimResult;
      try {
        claim = await store.claim(claimRequest(endpoint));
      } catch (error) {
        throw claimFailed(endpoint, error);
      }
      if (claim.outcome === 'existing') return answerExisting<T>(endpoint, claim);
      announceClaim(endpoint, claim);

      const { record } = claim;
      let result: ExecuteResult<T>;
      try {
        const value = await handler(claimContext(endpoint, record));
        result = { ok: true, value, replayed: false, generation: record.generation };
      } catch (error) {
        if (error instanceof HandlerNotStartedError) {
          await releaseClaim(endpoint.scope, endpoint.key, record);
          throw error.cause;
        }
        result = { ok: false, error, replayed: false, generation: record.generation };
      }

      await storeOutcome(endpoint.scope, endpoint.key, record, outcomeOf(endpoint, result));
      return result;
    },

    async executeAtomic<T>(request: ExecuteRequest, handler: (tx: unknown, claim: ClaimContext) => Promise<T> | T): Promise<ExecuteResult<T>> {
      const atomic = atomicModeOf(store);
      if (atomic.atomicHandlers === 'synchronous' && isAsyncFunction(handler)) throw new TypeError(SYNCHRONOUS_HANDLER_REQUIRED);
      const endpoint = resolve(request);
      const { scope, key } = endpoint;
      const attempt = atomicAttempt(endpoint, atomic, handler);

      let fresh;
      try {
        fresh = await atomic.atomicClaim(claimRequest(endpoint), attempt.run, attempt.toOutcome);
      } catch (error) {
        throw attempt.failure(error, 'claim');
      }
      if (fresh.executed) {
        const { record, result } = fresh;
        emit({ type: 'claimed', scope, key, generation: record.generation });
        return completed(endpoint, record, result, attempt.stored());
      }
      if (fresh.inProgress) {
        // Another transaction is running this key's handler; its claim is not visible before it
        // commits, so there is no record to read: 409 at once (E3), nothing held meanwhile.
        const retryAfter = Math.max(1, conflictRetryAfter);
        emit({ type: 'conflict', scope, key, retryAfter });
        throw new RequestInProgressError(retryAfter);
      }

      // The key has a record: the rules of `execute`, then the handler in a transaction of its own.
      let claim: ClaimResult;
      try {
        claim = await store.claim(claimRequest(endpoint));
      } catch (error) {
        throw claimFailed(endpoint, error);
      }
      if (claim.outcome === 'existing') return answerExisting<T>(endpoint, claim);
      announceClaim(endpoint, claim);
      const { record } = claim;
      let done;
      try {
        done = await atomic.atomicComplete({ scope, key, token: record.token }, attempt.run, attempt.toOutcome);
      } catch (error) {
        // Nothing was committed: give the claim back so that a retry runs at once (E4).
        await releaseClaim(scope, key, record);
        throw attempt.failure(error, 'complete');
      }
      if (done.completed) return completed(endpoint, record, done.result, attempt.stored());

      emit({ type: 'fenced', scope, key, generation: record.generation });
      let current;
      try {
        current = await store.get(scope, key);
      } catch (error) {
        emit({ type: 'storeError', scope, key, operation: 'claim', error, willRetry: false });
        throw new StoreUnavailableError(unavailableRetryAfter, error);
      }
      if (current && isReplayable(current)) return replay<T>(endpoint, current);
      const retryAfter = Math.max(1, conflictRetryAfter);
      emit({ type: 'conflict', scope, key, retryAfter });
      throw new RequestInProgressError(retryAfter);
    },
  };

  /** An {@link ExecuteRequest} with the engine's defaults filled in. */
  function resolve(request: ExecuteRequest) {
    const { scope, key, fingerprint } = request;
    const serializer = request.serializer ?? defaultSerializer;
    const errors = request.errors ?? defaultErrorCodec;
    const leaseMs = request.lease === undefined ? policy.leaseMs : toMilliseconds(request.lease);
    const retentionMs = request.retention === undefined ? policy.retentionMs : toMilliseconds(request.retention);
    if (request.lease !== undefined || request.retention !== undefined) warnIfRetentionBelowLease(retentionMs, leaseMs);
    return { scope, key, fingerprint, serializer, errors, leaseMs, retentionMs, expiredReuse: request.expiredReuse ?? policy.expiredReuse };
  }
  type Endpoint = ReturnType<typeof resolve>;

  /** What is stored of a handler's result: serialized, error described, size bounded. */
  function outcomeOf({ serializer, errors }: Endpoint, result: AtomicResult<unknown>): StoredOutcome {
    return boundedOutcome(toStoredOutcome(result, serializer, errors), maxStoredBytes, errors);
  }

  function claimRequest({ scope, key, fingerprint, leaseMs, retentionMs, expiredReuse }: Endpoint) {
    return { scope, key, fingerprint, token: randomUUID(), leaseMs, retentionMs, expiredReuse };
  }

  /**
   * The store failed to claim: 503. `execute` and `executeAtomic` each await `store.claim` in
   * their own try/catch on purpose: on the replay path every promise layer is a measurable share
   * of one SQLite read (a shared helper with `.then` took the floor's replay ratio from 1.10× to
   * 1.20× one SELECT).
   */
  function claimFailed({ scope, key }: Endpoint, error: unknown): StoreUnavailableError {
    emit({ type: 'storeError', scope, key, operation: 'claim', error, willRetry: false });
    return new StoreUnavailableError(unavailableRetryAfter, error);
  }

  /** The key already has a live record: 422 (expired with `reject`, or another payload), a replay, or 409. */
  function answerExisting<T>(endpoint: Endpoint, claim: Extract<ClaimResult, { outcome: 'existing' }>): ExecuteResult<T> {
    const { scope, key, fingerprint } = endpoint;
    const { record, now, expired } = claim;
    if (expired) {
      const previous = describeGeneration(record);
      emit({ type: 'expiredKeyRejected', scope, key, previous });
      throw new KeyExpiredError({ firstSeenAt: record.createdAt, completedAt: record.completedAt, expiresAt: record.expiresAt, status: previous.status });
    }
    if (record.fingerprint !== null && fingerprint !== null && record.fingerprint !== fingerprint) {
      emit({ type: 'mismatch', scope, key });
      throw new FingerprintMismatchError();
    }
    if (isReplayable(record)) return replay<T>(endpoint, record);
    const leaseLeft = Math.ceil((record.leaseUntil.getTime() - now.getTime()) / 1000);
    const retryAfter = Math.max(1, Math.min(conflictRetryAfter, leaseLeft));
    emit({ type: 'conflict', scope, key, retryAfter });
    throw new RequestInProgressError(retryAfter);
  }

  function replay<T>({ scope, key, serializer, errors }: Endpoint, record: IdempotencyRecord & { outcome: StoredOutcome & { body: string } }): ExecuteResult<T> {
    const { kind, status, body } = record.outcome;
    emit({ type: 'replayed', scope, key, generation: record.generation, status });
    if (kind === 'success') return { ok: true, value: deserializeValue(serializer, body) as T, replayed: true, generation: record.generation };
    return { ok: false, error: errors.revive(JSON.parse(body) as StoredErrorDescription), replayed: true, generation: record.generation };
  }

  function announceClaim({ scope, key }: Endpoint, claim: Extract<ClaimResult, { outcome: 'claimed' }>): void {
    const { record } = claim;
    if (claim.expired) {
      emit({ type: 'expiredKeyReused', scope, key, generation: record.generation, previous: describeGeneration(claim.expired) });
    }
    if (claim.takeover) {
      emit({ type: 'staleTakeover', scope, key, generation: record.generation, previousLeaseUntil: claim.takeover.previousLeaseUntil, takeovers: record.takeovers });
    }
    emit({ type: 'claimed', scope, key, generation: record.generation });
  }

  function claimContext({ scope, key }: Endpoint, { generation, token }: IdempotencyRecord, tx?: unknown): ClaimContext {
    const claim: ClaimContext = { scope, key, generation, token, deriveKey: (label) => deriveKey({ scope, key, generation }, label) };
    if (tx !== undefined) claim.tx = tx;
    return claim;
  }

  /** An atomic execution committed: the `completed` event, and the handler's result for the client. */
  function completed<T>({ scope, key }: Endpoint, record: IdempotencyRecord, result: AtomicResult<T>, stored: StoredOutcome | undefined): ExecuteResult<T> {
    if (stored) emit({ type: 'completed', scope, key, generation: record.generation, status: stored.status, outcomeKind: stored.kind });
    return { ...result, replayed: false, generation: record.generation };
  }

  /**
   * The callbacks one atomic execution hands the store, and how a rejection of the store is
   * answered: errors of idem's own making (a `HandlerNotStartedError`, an error codec that
   * threw, an async handler on SQLite) are rethrown as they are; anything else means the
   * transaction did not commit: 503.
   */
  function atomicAttempt<T>(endpoint: Endpoint, atomic: AtomicMode, handler: (tx: unknown, claim: ClaimContext) => Promise<T> | T) {
    const own = new Set<unknown>();
    let returnedPromise = false;
    let stored: StoredOutcome | undefined;
    return {
      run(tx: unknown, record: IdempotencyRecord): Promise<T> | T {
        const value = handler(tx, claimContext(endpoint, record, tx));
        if (isThenable(value)) returnedPromise = true;
        return value;
      },
      toOutcome(result: AtomicResult<T>): StoredOutcome {
        stored = undefined;
        try {
          // E4: a handler that did not start leaves nothing behind — here, by rolling back.
          if (!result.ok && result.error instanceof HandlerNotStartedError) throw result.error;
          return (stored = outcomeOf(endpoint, result));
        } catch (error) {
          own.add(error);
          throw error;
        }
      },
      /** The outcome the committed transaction stored. */
      stored: () => stored,
      failure(error: unknown, operation: 'claim' | 'complete'): unknown {
        if (own.has(error)) return error instanceof HandlerNotStartedError ? error.cause : error;
        if (returnedPromise && atomic.atomicHandlers === 'synchronous') return error;
        emit({ type: 'storeError', scope: endpoint.scope, key: endpoint.key, operation, error, willRetry: false });
        return new StoreUnavailableError(unavailableRetryAfter, error);
      },
    };
  }

  async function releaseClaim(scope: string, key: string, record: IdempotencyRecord) {
    try {
      if (await store.release({ scope, key, token: record.token })) emit({ type: 'released', scope, key, generation: record.generation });
    } catch (error) {
      // The claim then stays until its lease passes, and a retry takes it over (E6).
      emit({ type: 'storeError', scope, key, operation: 'release', error, willRetry: false });
    }
  }
}

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

function toStoredOutcome<T>(result: AtomicResult<T>, serializer: OutcomeSerializer, errors: ErrorCodec): StoredOutcome {
  if (result.ok) {
    try {
      return { kind: 'success', status: 200, body: serializeValue(serializer, result.value) };
    } catch (error) {
      // E4: the handler ran, so something must be stored; a value the serializer cannot
      // write is replayed as a 500 naming the cause rather than executed twice.
      const reason = error instanceof Error ? error.message : String(error);
      return describedError(errors, new OutcomeNotStoredError(`[idem] this request was executed (outcome: success, status 200), but its result could not be serialized for replay (${reason}). Do not retry it: look the result up instead.`, { executed: true, reason: 'unserializable', outcomeKind: 'success', status: 200 }));
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
  return describedError(
    errors,
    new OutcomeNotStoredError(
      `[idem] this request was executed (outcome: ${outcome.kind}, status ${outcome.status}), but its result (${size} bytes) is larger than the ${maxStoredBytes} bytes idem stores, so it cannot be replayed. Do not retry it: look the result up instead.`,
      { executed: true, reason: 'too_large', outcomeKind: outcome.kind, status: outcome.status, bytes: size, maxStoredBytes },
    ),
  );
}

const SYNCHRONOUS_HANDLER_REQUIRED = '[idem] atomic mode on SQLite needs a synchronous handler: better-sqlite3 transactions cannot span an await';

function atomicModeOf(store: IdempotencyStore): AtomicMode {
  const { atomicHandlers, atomicClaim, atomicComplete } = store;
  if (atomicHandlers === undefined || !atomicClaim || !atomicComplete) {
    throw new TypeError('[idem] this store has no atomic mode: use a store that implements it (@idem/drizzle on PostgreSQL or SQLite), or `execute`');
  }
  return { atomicHandlers, atomicClaim: atomicClaim.bind(store), atomicComplete: atomicComplete.bind(store) };
}

function isReplayable(record: IdempotencyRecord): record is IdempotencyRecord & { outcome: StoredOutcome & { body: string } } {
  return record.state === 'completed' && record.outcome !== null && record.outcome.body !== null;
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (typeof value === 'object' || typeof value === 'function') && value !== null && typeof (value as { then?: unknown }).then === 'function';
}

/** A native `async` function: refused before it runs on a store whose transactions are synchronous. */
function isAsyncFunction(fn: (...args: never[]) => unknown): boolean {
  return Object.prototype.toString.call(fn) === '[object AsyncFunction]';
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

async function retryUntil(deadline: number, attempt: () => Promise<void>, onError: (error: unknown, willRetry: boolean) => void): Promise<void> {
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
