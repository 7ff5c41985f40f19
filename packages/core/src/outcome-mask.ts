/**
 * The one masking rule of a stored outcome on its way out of the store through a key-status
 * lookup (R2, A1): whatever transport asks (the tRPC procedure, the GraphQL field, a plain HTTP
 * route) and whichever adapter stored it, the lookup shows no more of an unexpected error than a
 * masked replay does — never the SQL, the driver's text or the parameters a database error
 * carries in its message.
 */
import type { StoredOutcomeValue } from './client-retry.js';

/** What a key-status lookup says instead of the message of an unexpected error (Yoga's masked-error wording). */
export const MASKED_ERROR_MESSAGE = 'Unexpected error.';

/** The name idem gives the error it stores for an outcome it could not store: its message is idem's own. */
const OUTCOME_NOT_STORED = 'IdempotencyOutcomeNotStored';

/**
 * A stored error description as a key-status lookup may show it: the message of an error with
 * status 500 or more (an unexpected exception, whatever carried it) or marked unexpected by its
 * adapter (GraphQL's `data.unexpected`) is {@link MASKED_ERROR_MESSAGE}; name, code and status stay.
 * idem's own "executed, outcome not stored" 500 keeps its message: idem wrote it.
 */
export function maskStoredError(
  error: { name: string; code: string; message: string; status: number },
  stored?: unknown,
): { name: string; code: string; message: string; status: number } {
  const unexpected = (stored as { data?: { unexpected?: unknown } } | null | undefined)?.data?.unexpected;
  if (error.name === OUTCOME_NOT_STORED && !unexpected) return error;
  if (error.status < 500 && !unexpected) return error;
  return { ...error, message: MASKED_ERROR_MESSAGE };
}

/**
 * A stored success value as a key-status lookup may show it: a GraphQL result whose `errors`
 * hold errors its adapter marked `unexpected` has those messages replaced by
 * {@link MASKED_ERROR_MESSAGE} (their `path` kept, their `unexpected` mark dropped), as a masked
 * replay shows them. Any other value is returned as it is.
 */
export function maskStoredValue(value: unknown): unknown {
  const errors = (value as { errors?: unknown } | null)?.errors;
  if (!Array.isArray(errors) || !errors.some(isUnexpected)) return value;
  return {
    ...(value as object),
    errors: errors.map((error) => {
      if (!isUnexpected(error)) return error;
      const { path } = error as { path?: unknown };
      return { message: MASKED_ERROR_MESSAGE, ...(path ? { path } : {}) };
    }),
  };
}

/** A stored outcome as every key-status lookup presents it: {@link maskStoredError} or {@link maskStoredValue}. */
export function maskStoredOutcome(outcome: StoredOutcomeValue, stored: unknown): StoredOutcomeValue {
  return outcome.kind === 'error'
    ? { kind: 'error', error: maskStoredError(outcome.error, stored) }
    : { kind: 'success', value: maskStoredValue(outcome.value) };
}

function isUnexpected(error: unknown): boolean {
  return error !== null && typeof error === 'object' && Boolean((error as { unexpected?: unknown }).unexpected);
}
