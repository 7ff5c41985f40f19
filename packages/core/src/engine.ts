import { atomicModeOf } from './atomic-mode.js';
import type { ClaimContext } from './claim.js';
import { countWait, FIRST_WAIT_POLL_MS, MAX_WAIT_POLL_MS, sleep, waitMilliseconds } from './duplicate-wait.js';
import type {
  AtomicClaimContext,
  EngineOptions,
  ExecuteRequest,
  ExecuteResult,
  HandlerReturn,
  IdempotencyEngine,
} from './engine-types.js';
import {
  FingerprintMismatchError,
  KeyExpiredError,
  RequestInProgressError,
  StoreConfigurationError,
  StoreUnavailableError,
  DEFAULT_DOCUMENTATION_URL,
} from './errors.js';
import type { KeyedIdempotencyEvent, IdempotencyEventHandler, StoreOperation } from './events.js';
import {
  claimContext,
  claimRequest,
  isAwaitable,
  keyDeriver,
  liveResult,
  notStartedResult,
  ownerOf,
  resolveEndpoint,
  type Endpoint,
} from './endpoint.js';
import { isResumableFailure, notStartedFailure, retentionMsOf } from './failure-mode.js';
import { stepRunner, type SaveStep } from './steps.js';
import { runHandler, runInTransaction, type AtomicRun, type TransactionClaimed } from './handler-run.js';
import { keepLease } from './lease.js';
import {
  boundedOutcome,
  tooLargeOutcome,
  withErrors,
  type EncodedOutcome,
  type HandlerOutcome,
} from './outcome-codec.js';
import { OutcomeTooLargeError, type OutcomeSerializer } from './outcome.js';
import { retryUntil } from './outcome-retry.js';
import { describeGeneration, isReplayable, type Replayable } from './record-view.js';
import { warnIfRetentionBelowLease } from './retention-warning.js';
import type { ClaimResult, IdempotencyRecord, IdempotencyStore } from './store.js';
import { toMilliseconds, type Duration } from './duration.js';

export { formatScope } from './scope.js';
export type * from './engine-types.js';

const DEFAULT_LEASE: Duration = '30s';
const DEFAULT_MAX_STORED_BYTES = 1024 * 1024;

/** The engine over `options.store`; every option but `store` has a default (see {@link EngineOptions}). */
export function createEngine<TTx = unknown>(options: EngineOptions<TTx>): IdempotencyEngine<TTx> {
  return new Engine(options);
}

class Engine<TTx> implements IdempotencyEngine<TTx> {
  readonly store: IdempotencyStore<TTx>;
  readonly policy: IdempotencyEngine['policy'];
  /** The codec of requests that bring none: `serializerCodec` over the engine's `serializer`. */
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
      retention,
      onFailure = 'replay',
      lease = DEFAULT_LEASE,
      wait = 0,
      expiredReuse = 'execute',
      conflictRetryAfter = 1,
      unavailableRetryAfter = 2,
      maxStoredBytes = DEFAULT_MAX_STORED_BYTES,
    } = options;
    this.store = store;
    this.policy = {
      // R1, E8: 24 hours, or 30 days for `onFailure: 'resume'`, unless a retention is given.
      retentionMs: retentionMsOf(retention, { retentionMs: 0, retentionExplicit: false }, onFailure),
      retentionExplicit: retention !== undefined,
      leaseMs: toMilliseconds(lease),
      expiredReuse,
      onFailure,
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

  async execute<TLive, TStored = TLive, TAnswer = never>(
    request: ExecuteRequest<TLive, TStored>,
    handler: (claim: ClaimContext<TTx>) => Promise<HandlerReturn<TLive, TAnswer>> | HandlerReturn<TLive, TAnswer>,
  ): Promise<ExecuteResult<TLive, TStored, TAnswer>> {
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
    // E8: the recovery points of this generation, each result stored as soon as its step returns.
    const steps = this.#steps(endpoint, record, (name, result) =>
      this.store.saveStep({ ...ownerOf(endpoint, record), name, result }),
    );
    let run;
    try {
      run = await runHandler(() => handler(claimContext(endpoint, record, lease.signal, steps.step)));
    } finally {
      lease.stop();
    }
    // E4: not started, and no step recorded: nothing happened, the claim is given back. After a
    // step (E8) a side effect did happen: the failure is stored instead, and the client still
    // gets the answer it was given.
    if (!run.started && !steps.recorded()) {
      await this.#release(endpoint, record);
      if ('rethrow' in run) throw run.rethrow;
      return notStartedResult(run.answer, generation);
    }
    const result = run.started ? run.result : notStartedFailure(run);
    const outcome = this.#outcomeOf(endpoint, result);
    const resumable = isResumableFailure(record.onFailure, result, outcome);
    const leaseUntil = Math.max(record.leaseUntil.getTime(), lease.renewedAt + endpoint.leaseMs);
    await this.#storeOutcome(
      endpoint,
      { ...record, leaseUntil: new Date(leaseUntil) },
      { outcome, resumable },
      withErrors(endpoint.codec, outcome.kind, result.ok ? result.value : undefined),
      run.durationMs,
    );
    if (!run.started) {
      if ('rethrow' in run) throw run.rethrow;
      return notStartedResult(run.answer, generation, resumable);
    }
    return liveResult(result, generation, resumable);
  }

  /** E8: `claim.step` for one execution of `record`, its results written through `save`. */
  #steps(endpoint: Endpoint<unknown, unknown>, record: IdempotencyRecord, save: SaveStep) {
    const { subject } = endpoint;
    const { generation } = record;
    return stepRunner({
      steps: record.steps,
      serializer: this.#serializer,
      maxStoredBytes: this.#maxStoredBytes,
      deriveKey: keyDeriver(endpoint, record),
      save: async (name, result) => {
        try {
          return await save(name, result);
        } catch (error) {
          const failed = { storeOperation: 'saveStep', generation, error, willRetry: false } as const;
          this.#emit({ type: 'storeError', ...subject, ...failed });
          throw error;
        }
      },
    });
  }

  /**
   * E3w: a duplicate of an execution in progress asks the store again, with back-off, until the
   * outcome is stored (then replayed), the claim is free (then this request claims it), or
   * `waitMs` passes (then 409). Nothing is held between two asks.
   */
  async #wait(
    endpoint: Endpoint<unknown, unknown>,
    first: Extract<ClaimResult, { outcome: 'existing' }>,
  ): Promise<ClaimResult> {
    const start = Date.now();
    const deadline = start + endpoint.waitMs;
    // A1: settled before this waiter asks again, so that it never holds two connections.
    const { scope, key, subject } = endpoint;
    const generation = first.record.generation;
    const counted = countWait(this.store, { scope, key, generation }, (error) =>
      this.#emit({ type: 'storeError', ...subject, storeOperation: 'countWait', generation, error, willRetry: false }),
    );
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

  async executeAtomic<TLive, TStored = TLive, TAnswer = never>(
    request: ExecuteRequest<TLive, TStored>,
    handler: (claim: AtomicClaimContext<TTx>) => Promise<HandlerReturn<TLive, TAnswer>> | HandlerReturn<TLive, TAnswer>,
  ): Promise<ExecuteResult<TLive, TStored, TAnswer>> {
    const { transaction } = atomicModeOf(this.store, { asking: 'executeAtomic', otherwise: 'use `execute`' });
    const endpoint = this.#endpoint(request);
    if (endpoint.waitMs > 0)
      throw new TypeError(
        '[idem] `wait` cannot be combined with atomic mode: a claim there is invisible until its transaction commits, so a duplicate has no outcome in progress to wait for (E3w)',
      );

    // E1: a new key is claimed inside the transaction its handler runs in, so nothing of it is
    // visible, and nothing stays after a crash, before the commit.
    let fresh: TransactionClaimed<TLive, TAnswer> | { outcome: 'exists' | 'inProgress' };
    try {
      fresh = await transaction<typeof fresh>(async (t) => {
        const claim = await t.insertClaim(claimRequest(endpoint));
        if (claim.outcome !== 'claimed') return { commit: false, value: claim };
        const run = await runInTransaction(endpoint, t, claim.record, handler, {
          encode: (outcome) => this.#outcomeOf(endpoint, outcome),
          steps: (save) => this.#steps(endpoint, claim.record, save),
        });
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
    let run: AtomicRun<TLive, TAnswer>;
    try {
      run = await transaction<AtomicRun<TLive, TAnswer>>(async (t) => {
        const owned = await t.lockOwned(ownerOf(endpoint, record));
        if (!owned) return { commit: false, value: { outcome: 'fenced' } };
        return runInTransaction(endpoint, t, owned, handler, {
          encode: (outcome) => this.#outcomeOf(endpoint, outcome),
          steps: (save) => this.#steps(endpoint, owned, save),
        });
      });
    } catch (error) {
      // Nothing was committed: give the claim back so that a retry runs at once (E4), unless steps
      // of an earlier attempt are recorded (E8): a takeover after the lease keeps them.
      if (!record.steps?.length) await this.#release(endpoint, record);
      throw this.#unavailable(endpoint, 'complete', record.generation, error);
    }
    if ((run.outcome === 'notStarted' || run.outcome === 'unstorable') && !record.steps?.length)
      await this.#release(endpoint, record);
    return this.#afterTransaction(endpoint, record, run);
  }

  /** What the client gets once an atomic execution's transaction has ended. */
  async #afterTransaction<TLive, TStored, TAnswer>(
    endpoint: Endpoint<TLive, TStored>,
    record: IdempotencyRecord,
    run: AtomicRun<TLive, TAnswer>,
  ): Promise<ExecuteResult<TLive, TStored, TAnswer>> {
    const { scope, key, subject } = endpoint;
    const { generation } = record;
    switch (run.outcome) {
      case 'completed': {
        const { status, kind } = run.stored;
        const failed = withErrors(endpoint.codec, kind, run.result.ok ? run.result.value : undefined);
        const { durationMs, resumable } = run;
        const completed = { status, outcomeKind: kind, withErrors: failed, durationMs, resumable };
        this.#emit({ type: 'completed', ...subject, generation, ...completed });
        if (run.notStarted) {
          if ('rethrow' in run.notStarted) throw run.notStarted.rethrow;
          return notStartedResult(run.notStarted.answer, generation, resumable);
        }
        return liveResult(run.result, generation, resumable);
      }
      case 'notStarted':
        if ('rethrow' in run) throw run.rethrow;
        return notStartedResult(run.answer, generation);
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
  #endpoint<TLive, TStored>(request: ExecuteRequest<TLive, TStored>): Endpoint<TLive, TStored> {
    return resolveEndpoint(request, this.policy, this.#serializer);
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
  #answerExisting<TLive, TStored>(
    endpoint: Endpoint<TLive, TStored>,
    { record, now, expired }: Extract<ClaimResult, { outcome: 'existing' }>,
  ): ExecuteResult<TLive, TStored> {
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

  /** E2: the stored outcome, as the codec decodes it. */
  #replay<TLive, TStored>(
    { subject, codec }: Endpoint<TLive, TStored>,
    record: Replayable,
  ): ExecuteResult<TLive, TStored> {
    const { kind, status, body } = record.outcome;
    const { generation } = record;
    const decoded = codec.decode({ kind, status, body });
    const failed = withErrors(codec, kind, decoded.ok ? decoded.value : undefined);
    this.#emit({ type: 'replayed', ...subject, generation, status, withErrors: failed });
    return decoded.ok
      ? { ok: true, value: decoded.value, replayed: true, generation }
      : { ok: false, error: decoded.error, replayed: true, generation };
  }

  #announce({ subject }: Endpoint, claim: Extract<ClaimResult, { outcome: 'claimed' }>): void {
    const { record, expired, takeover, resumed } = claim;
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
    if (resumed) this.#emit({ type: 'resumed', ...subject, generation, ...resumed });
  }

  /** What is stored of a handler's outcome: encoded by the codec, size bounded. */
  #outcomeOf<TLive, TStored>({ codec }: Endpoint<TLive, TStored>, result: HandlerOutcome<TLive>): EncodedOutcome {
    const max = this.#maxStoredBytes;
    try {
      return boundedOutcome(codec, codec.encode(result), max);
    } catch (error) {
      if (!(error instanceof OutcomeTooLargeError)) throw error;
      return tooLargeOutcome(codec, 'success', error.status, error.bytes, max, true);
    }
  }

  /** E4, E7: stores the outcome; when the write fails, retries it in the background until the lease ends. */
  async #storeOutcome(
    { scope, key, subject }: Endpoint<unknown, unknown>,
    record: IdempotencyRecord,
    { outcome, resumable }: { outcome: EncodedOutcome; resumable: boolean },
    withErrors: boolean,
    durationMs: number,
  ): Promise<void> {
    const { token, generation } = record;
    const attempt = async () => {
      const owned = await this.store.complete({ scope, key, token, outcome, ...(resumable ? { resumable } : {}) });
      const { status, kind: outcomeKind } = outcome;
      const completed = { status, outcomeKind, withErrors, durationMs, resumable };
      if (owned) this.#emit({ type: 'completed', ...subject, generation, ...completed });
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
