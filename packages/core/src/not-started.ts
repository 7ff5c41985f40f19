/**
 * E4, "the handler did not start": its real work never began (an authorization or rate-limit
 * check refused it, or a side effect it checked did not happen), so nothing is stored and the
 * claim is released for a retry with the same key. A resolver says so with {@link notStarted};
 * an adapter tells the engine by returning {@link notStartedAnswer} from its handler.
 */
import { idempotencyClaim, type ClaimContext } from './claim.js';

const NOT_STARTED: unique symbol = Symbol('@idem/not-started');

/**
 * What a handler returns when it did not start: `answer` goes to the client unstored, the claim is
 * released — unless a step of the generation completed (`claim.step`, E8): then a side effect
 * happened, and the failure is stored (or left resumable) instead.
 */
export interface NotStartedAnswer<T> {
  readonly [NOT_STARTED]: true;
  readonly answer: T;
}

/**
 * E4: the value an adapter's handler returns when the work did not start; `engine.execute`
 * then releases the claim, stores nothing and gives `answer` back (`result.notStarted`).
 */
export function notStartedAnswer<T>(answer: T): NotStartedAnswer<T> {
  return { [NOT_STARTED]: true, answer };
}

/** Whether a handler's value is a {@link notStartedAnswer}. */
export function isNotStartedAnswer<TLive, TAnswer>(
  value: TLive | NotStartedAnswer<TAnswer>,
): value is NotStartedAnswer<TAnswer> {
  return typeof value === 'object' && value !== null && NOT_STARTED in value;
}

/** Claims whose resolver said it did not start. */
const notStartedClaims = new WeakSet<ClaimContext<unknown>>();

/**
 * E4: says that the resolver running under `context`'s claim did not start its real work, and
 * returns `reason` for you to throw: `throw notStarted(ctx, new TRPCError({ code: 'TOO_MANY_REQUESTS' }))`.
 * The client gets `reason` as its answer, nothing is stored, and the key is released so that a
 * retry with it runs. Release only what a retry may run again: a failure released after a side
 * effect did happen runs it twice, unless the effect is deduplicated by `claim.deriveKey(…)`,
 * which a retry after a release gets again. After a step completed (`claim.step`, E8) the claim
 * is not released: the failure is stored, or left resumable under `onFailure: 'resume'`. Outside
 * an idempotent execution (no claim on `context`) it only returns `reason`.
 */
export function notStarted<E>(context: unknown, reason: E): E {
  const claim = idempotencyClaim(context);
  if (claim) notStartedClaims.add(claim);
  return reason;
}

/** For adapters: whether the resolver under `claim` said it did not start ({@link notStarted}). */
export function saidNotStarted(claim: ClaimContext<unknown>): boolean {
  return notStartedClaims.has(claim);
}

/**
 * @deprecated Return {@link notStartedAnswer} from an engine handler, or throw
 * `notStarted(ctx, error)` from a resolver under an adapter. Kept for code that calls
 * `engine.execute` / `engine.executeAtomic` directly: a handler that throws it has its claim
 * released, nothing stored, and `cause` rethrown, as before. Adapters do not look for it: a
 * resolver under `@idem/trpc`, `@idem/envelop` or `@idem/apollo-server` that throws it has its
 * failure stored.
 */
export class HandlerNotStartedError extends Error {
  constructor(override readonly cause: unknown) {
    super('[idem] the handler did not start', { cause });
    this.name = 'HandlerNotStartedError';
  }
}
