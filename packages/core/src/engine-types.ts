/** The engine's public types: its options, one execution's request and result, and the engine itself. */
import type { ClaimContext } from './claim.js';
import type { Duration } from './duration.js';
import type { IdempotencyEventHandler } from './events.js';
import type { NotStartedAnswer } from './not-started.js';
import type { OutcomeCodec } from './outcome-codec.js';
import type { ErrorCodec, OutcomeSerializer } from './outcome.js';
import type { IdempotencyStore, OnFailure } from './store.js';

/** Retention and lease rules of one endpoint; every field falls back to the engine's. */
export interface EndpointPolicy {
  /**
   * R1: how long an outcome is kept and replayed, counted from its completion. A claim still
   * running inside its lease never expires, whatever the retention; a retention shorter than the
   * lease is warned about (`IDEM_RETENTION_BELOW_LEASE`). Defaults to 24 hours (Stripe v1), or to
   * 30 days for an endpoint with `onFailure: 'resume'` (Stripe v2) when neither it nor the engine
   * sets one.
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
  /**
   * E8: what a failure after the handler started does (a thrown error, a 5xx).
   * - `'replay'` (Stripe v1, the default): it is stored and replayed for the whole retention, like
   *   any outcome (E4).
   * - `'resume'` (Stripe v2, "complete on retry"): it leaves the record `resumable`, and the live
   *   answer is marked so (`Idempotent-Resumable: true`, `result.resumable`). A retry with the same
   *   key and payload runs the handler again in the same generation, `claim.step` skipping the
   *   steps already done, and answers the completed result; later retries replay it. A 4xx, or a
   *   failure wrapped in `finalFailure(…)`, is final: stored and replayed as under `'replay'`.
   *
   * The mode is fixed per generation when it is claimed (stored on the record): a configuration
   * changed meanwhile never mixes the two within one generation. Published in the policy (R4).
   */
  onFailure?: OnFailure;
}

export interface EngineOptions<TTx = unknown> extends EndpointPolicy {
  /** Where records live. Its transaction type, if it has atomic mode, is what `claim.tx` holds. */
  store: IdempotencyStore<TTx>;
  /**
   * Serializer for stored success values: `JSON` (default) or anything with `stringify`/`parse`,
   * such as `superjson`. It builds the engine's default {@link OutcomeCodec} (`serializerCodec`),
   * used by every request that brings no `codec` of its own.
   */
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

export interface ExecuteRequest<TLive = unknown, TStored = TLive> extends EndpointPolicy {
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
  /**
   * How this endpoint's outcomes are stored and replayed: the adapter's typed codec
   * (`@idem/core/adapter`). Defaults to `serializerCodec` over `serializer`, `errors` and
   * `statusOf` below, then the engine's `serializer`.
   */
  codec?: OutcomeCodec<TLive, TStored>;
  /** @deprecated Pass `codec` (`serializerCodec({ serializer })`). Overrides the engine's serializer for this endpoint. */
  serializer?: OutcomeSerializer;
  /** @deprecated Pass `codec` (`serializerCodec({ errors })`). How this endpoint's errors are stored and rebuilt. */
  errors?: ErrorCodec;
  /** @deprecated Pass `codec` (`outcomeCodec({ statusOf, … })`). The status a success value is stored with. */
  statusOf?: (value: unknown) => number;
}

/** The claim an atomic handler runs under: its `tx` is the store's transaction. */
export type AtomicClaimContext<TTx> = ClaimContext<TTx> & { tx: TTx };

/**
 * The outcome the client gets, and whether it was replayed (E2): live, the handler's own value
 * (`TLive`) or error; replayed, what the codec decoded (`TStored`), or the error it rebuilt. With
 * a handler that may return a `notStartedAnswer` (`TAnswer`), a run that did not start: nothing
 * stored, the claim released, `answer` for the client (E4). `resumable: true` (E8, a live result
 * only): the endpoint's `onFailure` is `'resume'` and this attempt failed after it started: the
 * record is resumable, and a retry with the same key and payload completes the work (hosts mark
 * the answer with `Idempotent-Resumable: true`). A Fetch handler's 500 `Response` is a value, so
 * the success branch may carry it too.
 */
export type ExecuteResult<TLive, TStored = TLive, TAnswer = never> =
  | { ok: true; replayed: false; value: TLive; generation: number; resumable?: true }
  | { ok: true; replayed: true; value: TStored; generation: number; resumable?: undefined }
  | { ok: false; replayed: boolean; error: unknown; generation: number; resumable?: true }
  | {
      ok: false;
      replayed: false;
      notStarted: true;
      answer: TAnswer;
      error?: undefined;
      generation: number;
      /** E8: said after a step was recorded, so stored (not released): resumable under `onFailure: 'resume'`. */
      resumable?: true;
    };

/** What a handler may give the engine: its value, or a `notStartedAnswer` (E4). */
export type HandlerReturn<TLive, TAnswer> = TLive | NotStartedAnswer<TAnswer>;

export interface IdempotencyEngine<TTx = unknown> {
  /**
   * Runs `handler` at most once per (scope, key) within the retention: claim → run → store
   * the outcome (E1, E4), or replay a stored one (E2). Throws an `IdempotencyError` for 400 (a
   * scope too long to store), 409, 422 and 503; handler failures are returned (`ok: false`), not thrown.
   * A handler whose work did not start returns `notStartedAnswer(answer)` (`@idem/core/adapter`):
   * its claim is released, nothing is stored, and the result is `{ notStarted: true, answer }` (E4);
   * after a step completed (`claim.step`, E8) a side effect happened, so its failure is stored
   * instead (resumable under `onFailure: 'resume'`), the answer still given back.
   */
  execute<TLive, TStored = TLive, TAnswer = never>(
    request: ExecuteRequest<TLive, TStored>,
    handler: (claim: ClaimContext<TTx>) => Promise<HandlerReturn<TLive, TAnswer>> | HandlerReturn<TLive, TAnswer>,
  ): Promise<ExecuteResult<TLive, TStored, TAnswer>>;
  /**
   * `execute` in atomic mode: `handler` runs inside the store's transaction, `claim.tx`; its
   * writes through it commit in the same transaction as the claim and the stored outcome. A
   * crash before the commit leaves nothing, so the retry executes cleanly; after it, the retry
   * replays. A handler that throws, or returns a value its codec encodes as an `'error'`, has its
   * writes rolled back and its outcome stored (E4); one that returns a `notStartedAnswer` has its
   * writes rolled back and nothing stored. When the
   * transaction fails to commit, nothing happened: 503 `StoreUnavailableError`, and a retry with
   * the same key either executes or replays. Needs a store with atomic mode (`AtomicMode` in
   * `@idem/core/store`).
   * @throws TypeError `[idem] …` when the store has no atomic mode.
   */
  executeAtomic<TLive, TStored = TLive, TAnswer = never>(
    request: ExecuteRequest<TLive, TStored>,
    handler: (claim: AtomicClaimContext<TTx>) => Promise<HandlerReturn<TLive, TAnswer>> | HandlerReturn<TLive, TAnswer>,
  ): Promise<ExecuteResult<TLive, TStored, TAnswer>>;
  /** The resolved engine-wide policy, in milliseconds. */
  readonly policy: {
    retentionMs: number;
    leaseMs: number;
    expiredReuse: 'execute' | 'reject';
    /** E8: what a failure after the start does (`onFailure`). */
    onFailure: OnFailure;
    /** Whether `retention` was given (otherwise an endpoint with `onFailure: 'resume'` keeps 30 days). */
    retentionExplicit: boolean;
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
