/**
 * E8: a failure the handler declares final. Under `onFailure: 'resume'` a failure after the start
 * (a thrown error, a 5xx) leaves the record resumable, so that a retry completes the work; a
 * failure no retry can mend (the card was declined, the input is wrong) is wrapped in
 * {@link finalFailure} and is stored and replayed as under `'replay'` (Stripe v1). A 4xx is final
 * without it.
 */

const finals = new WeakSet<object>();

/**
 * E8: marks `failure` — an error to throw, or an answer object to return (a Fetch `Response`, a
 * result that carries errors) — as final: under `onFailure: 'resume'` it is stored and replayed,
 * never resumed. Returns `failure` itself: `throw finalFailure(new TRPCError({ … }))`. A primitive
 * cannot be marked and is returned as it is.
 */
export function finalFailure<T>(failure: T): T {
  if ((typeof failure === 'object' && failure !== null) || typeof failure === 'function') finals.add(failure);
  return failure;
}

/** Whether `value` was marked with {@link finalFailure}. */
export function isFinalFailure(value: unknown): boolean {
  return ((typeof value === 'object' && value !== null) || typeof value === 'function') && finals.has(value);
}
