/**
 * One run of a handler under its claim, as the engine sees it: what it did, how long it took,
 * whether it started (E4); plain, or on a savepoint of the store's transaction (atomic mode).
 */
import type { AtomicClaimContext, HandlerReturn } from './engine-types.js';
import { claimContext, ownerOf, type Endpoint } from './endpoint.js';
import { neverAborted } from './lease.js';
import { HandlerNotStartedError, isNotStartedAnswer } from './not-started.js';
import type { EncodedOutcome, HandlerOutcome } from './outcome-codec.js';
import { isResumableFailure, notStartedFailure } from './failure-mode.js';
import type { SaveStep, StepRunner } from './steps.js';
import type { IdempotencyRecord, StoreTransaction, TransactionEnd } from './store.js';

/**
 * E4, "the handler started": a run of the handler, unless it returned a `notStartedAnswer`,
 * which says that its real work never began (its claim is then given back, nothing stored).
 */
export type HandlerRun<TLive, TAnswer> = { durationMs: number } & (
  | { started: true; result: HandlerOutcome<TLive> }
  | { started: false; answer: TAnswer }
  | { started: false; rethrow: unknown }
);

/** Runs `run` and times it: from its call until its promise settles (the `durationMs` of `completed`). */
export async function runHandler<TLive, TAnswer>(
  run: () => Promise<HandlerReturn<TLive, TAnswer>> | HandlerReturn<TLive, TAnswer>,
): Promise<HandlerRun<TLive, TAnswer>> {
  const start = performance.now();
  try {
    const value = await run();
    const durationMs = performance.now() - start;
    if (isNotStartedAnswer(value)) return { started: false, answer: value.answer, durationMs };
    return { started: true, result: { ok: true, value }, durationMs };
  } catch (error) {
    const durationMs = performance.now() - start;
    if (error instanceof HandlerNotStartedError) return { started: false, rethrow: error.cause, durationMs };
    return { started: true, result: { ok: false, error }, durationMs };
  }
}

/**
 * How an atomic execution's transaction ended: `completed` was committed with its outcome; the
 * others were rolled back, the handler's writes with them.
 */
export type AtomicRun<TLive, TAnswer> =
  | {
      outcome: 'completed';
      result: HandlerOutcome<TLive>;
      stored: EncodedOutcome;
      durationMs: number;
      /** E8: stored as `resumable` (`onFailure: 'resume'`, a failure not declared final). */
      resumable: boolean;
      /** E8: the handler said it did not start after a step was recorded: its failure stored, its answer for the client. */
      notStarted?: { answer: TAnswer } | { rethrow: unknown };
    }
  | { outcome: 'notStarted'; answer: TAnswer }
  | { outcome: 'notStarted'; rethrow: unknown }
  | { outcome: 'unstorable'; error: unknown }
  | { outcome: 'fenced' };

/** A new key claimed inside the transaction, and how that transaction ended. */
export type TransactionClaimed<TLive, TAnswer> = {
  outcome: 'claimed';
  record: IdempotencyRecord;
  run: AtomicRun<TLive, TAnswer>;
};

/**
 * The handler on a savepoint of the open transaction, then its outcome stored there, in the
 * transaction's end: committed once the outcome is stored; rolled back — the handler's writes
 * with it — when the handler did not start (E4), when its outcome cannot be described, or when
 * the claim is no longer this execution's (E6). `encode`: the
 * endpoint's codec, size bounded. `steps`: `claim.step` (E8), its results written through the
 * transaction, each followed by a recovery point, so that a failure later in the handler rolls
 * back to the last step (its writes commit with its stored result).
 */
export async function runInTransaction<TTx, TLive, TStored, TAnswer>(
  endpoint: Endpoint<TLive, TStored>,
  t: StoreTransaction<TTx>,
  record: IdempotencyRecord,
  handler: (claim: AtomicClaimContext<TTx>) => Promise<HandlerReturn<TLive, TAnswer>> | HandlerReturn<TLive, TAnswer>,
  {
    encode,
    steps: stepsOf,
  }: { encode: (outcome: HandlerOutcome<TLive>) => EncodedOutcome; steps: (save: SaveStep) => StepRunner },
): Promise<TransactionEnd<AtomicRun<TLive, TAnswer>>> {
  const owner = ownerOf(endpoint, record);
  const steps = stepsOf(async (name, result) => {
    if (!(await t.saveStep({ ...owner, name, result }))) return false;
    await t.recoveryPoint();
    return true;
  });
  // The handler's own time, inside the savepoint: without the savepoint's statements.
  let durationMs = 0;
  // What the handler did, to tell its outcome from a failure of the savepoint's own statements.
  let thrown: { error: unknown } | undefined;
  let returned: { value: TLive; stored: EncodedOutcome | { unstorable: unknown } } | undefined;
  let notStarted: { answer: TAnswer } | undefined;
  const rollBack = new Error('[idem] the handler returned a failure: its writes are rolled back (E4)');
  try {
    await t.savepoint(async (tx) => {
      const start = performance.now();
      let value: HandlerReturn<TLive, TAnswer>;
      try {
        // The open transaction holds the claim (E6): nothing can take it over before it ends.
        value = await handler({ ...claimContext(endpoint, record, neverAborted(), steps.step), tx });
      } catch (error) {
        thrown = { error };
        throw error;
      } finally {
        durationMs = performance.now() - start;
      }
      // Not started: the whole transaction rolls back below, the handler's writes with it. After a
      // step (E8), back to the last recovery point only: that step's writes and result are kept.
      if (isNotStartedAnswer(value)) {
        notStarted = { answer: value.answer };
        if (steps.recorded()) throw rollBack;
        return;
      }
      let stored: EncodedOutcome | { unstorable: unknown };
      try {
        stored = encode({ ok: true, value });
      } catch (error) {
        stored = { unstorable: error };
      }
      returned = { value, stored };
      // A returned value the codec stores as a failure undoes its writes, as a thrown error does.
      if ('kind' in stored && stored.kind === 'error') throw rollBack;
    });
  } catch (error) {
    // `SAVEPOINT`, `RELEASE` or `ROLLBACK TO` failed (a lost connection, a transaction the
    // database aborted): not the handler's outcome, and nothing of it may be stored or shown.
    // The transaction failed: it rolls back, and the client is answered 503 (E5).
    if (error !== rollBack && (thrown === undefined || error !== thrown.error)) throw error;
  }
  // Deprecated: a HandlerNotStartedError thrown by a direct engine caller's handler (its cause rethrown).
  const said: { answer: TAnswer } | { rethrow: unknown } | undefined =
    notStarted ?? (thrown?.error instanceof HandlerNotStartedError ? { rethrow: thrown.error.cause } : undefined);
  if (said && !steps.recorded()) return { commit: false, value: { outcome: 'notStarted', ...said } };
  let result: HandlerOutcome<TLive>;
  let stored: EncodedOutcome;
  try {
    if (said) {
      result = notStartedFailure(said);
      stored = encode(result);
    } else if (returned) {
      if (!('kind' in returned.stored)) throw returned.stored.unstorable;
      result = { ok: true, value: returned.value };
      stored = returned.stored;
    } else {
      result = { ok: false, error: thrown?.error };
      stored = encode(result);
    }
  } catch (error) {
    return { commit: false, value: { outcome: 'unstorable', error } };
  }
  const resumable = isResumableFailure(record.onFailure, result, stored);
  if (!(await t.complete({ ...owner, outcome: stored, ...(resumable ? { resumable } : {}) })))
    return { commit: false, value: { outcome: 'fenced' } };
  const completed = { outcome: 'completed', result, stored, durationMs, resumable } as const;
  return { commit: true, value: said ? { ...completed, notStarted: said } : completed };
}
