/**
 * E8: what a failure after the handler started does, per the record's mode (`onFailure`): stored
 * and replayed (`'replay'`, Stripe v1), or left resumable so that a retry completes the work
 * (`'resume'`, Stripe v2). And the retention each mode defaults to.
 */
import { toMilliseconds, type Duration } from './duration.js';
import { isFinalFailure } from './final-failure.js';
import { describesOutcomeNotStored } from './outcome.js';
import type { EncodedOutcome, HandlerOutcome } from './outcome-codec.js';
import type { OnFailure } from './store.js';

/** R1: the retention of `'replay'` endpoints when none is set (Stripe v1: 24 hours). */
export const REPLAY_RETENTION: Duration = '24h';
/** R1, E8: the retention of `'resume'` endpoints when neither they nor the engine set one (Stripe v2: 30 days). */
export const RESUME_RETENTION: Duration = '30d';

/**
 * The retention of an endpoint, in milliseconds: its own, else the engine's when the engine was
 * given one, else the default of its mode.
 */
export function retentionMsOf(
  own: Duration | undefined,
  engine: { retentionMs: number; retentionExplicit: boolean },
  onFailure: OnFailure,
): number {
  if (own !== undefined) return toMilliseconds(own);
  if (engine.retentionExplicit) return engine.retentionMs;
  return toMilliseconds(onFailure === 'resume' ? RESUME_RETENTION : REPLAY_RETENTION);
}

/**
 * E8: whether an outcome leaves its record resumable: the record's mode is `'resume'`, the
 * handler failed (a thrown error, or a value its codec stores as a failure) with a status of 500
 * or more, the failure was not declared final ({@link finalFailure}), and it is not the engine's
 * own "executed, but not stored" 500 (a result too large or unserializable: the work completed).
 */
export function isResumableFailure(
  onFailure: OnFailure,
  result: HandlerOutcome<unknown>,
  stored: EncodedOutcome,
): boolean {
  if (onFailure !== 'resume' || stored.status < 500) return false;
  if (isFinalFailure(result.ok ? result.value : result.error)) return false;
  if (stored.kind === 'error' && describesNotStored(stored.body)) return false;
  return true;
}

function describesNotStored(body: string): boolean {
  try {
    const description = JSON.parse(body) as unknown;
    return typeof description === 'object' && description !== null && describesOutcomeNotStored(description as never);
  } catch {
    return false;
  }
}

/**
 * E4, E8: the handler said it did not start (`notStarted`), but a step of its generation is
 * recorded: a side effect happened, so the claim is not released. This failure is stored in its
 * place (replayed under `'replay'`, resumable under `'resume'`).
 */
export class StartedAfterStepError extends Error {
  readonly status = 500;
  readonly code = 'INTERNAL_SERVER_ERROR';
  constructor(override readonly cause?: unknown) {
    super(
      '[idem] the handler said it did not start, but a step of this request had completed (claim.step): its work did start, so the failure is stored rather than the key released',
      cause === undefined ? undefined : { cause },
    );
    this.name = 'StartedAfterStepError';
  }
}

/** The outcome stored for a run that said it did not start after a step was recorded. */
export function notStartedFailure(run: { rethrow: unknown } | { answer: unknown }): HandlerOutcome<never> {
  return { ok: false, error: 'rethrow' in run ? run.rethrow : new StartedAfterStepError() };
}
