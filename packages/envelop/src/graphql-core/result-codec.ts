/**
 * How a GraphQL unit's outcome is stored and replayed (E2, E4): its result, written by the user's
 * serializer (`JSON` or e.g. `superjson`) in the stored shape, replayed as a
 * {@link StoredExecutionResult}; what an execute function threw, as a GraphQLError.
 */
import { GraphQLError, type ExecutionResult, type Source } from 'graphql';
import type { OutcomeSerializer, StoredErrorDescription } from '@idem/core';
import { isFinalFailure, outcomeCodec, type OutcomeCodec } from '@idem/core/adapter';
import { graphqlErrorCodec, toStoredResult, unexpectedCause, type StoredExecutionResult } from './stored-result.js';

/** The `name` of a rolled-back unit's stored description: its whole result is in `data`. */
const ROLLED_BACK = 'IdempotencyRolledBackExecution';

/**
 * The codec of one unit. A result in which a root field failed (see {@link rootFieldFailed}) is
 * encoded as an `'error'` in atomic mode, so that the engine rolls the unit's writes back, and
 * under `onFailure: 'resume'` unless it is final (`finalFailure`, see {@link isFinalResult}), so
 * that the engine leaves it resumable (E8); it is stored whole under the status and code of its
 * first error and replayed as the same result. A final one under `'resume'` is stored as under
 * `'replay'`.
 */
export function resultCodec(
  serializer: OutcomeSerializer,
  source: Source | undefined,
  { atomic, resume }: { atomic: boolean; resume: boolean },
): OutcomeCodec<ExecutionResult, StoredExecutionResult> {
  const errors = graphqlErrorCodec(source);
  const base = outcomeCodec<ExecutionResult, StoredExecutionResult>({
    stringify: (result) => serializer.stringify(toStoredResult(result)),
    parse: (text) => serializer.parse(text),
    errors,
    // The `withErrors` of idem's events: a result with errors is answered 200 but failed.
    carriesErrors: (result) => (result.errors?.length ?? 0) > 0,
  });
  return {
    ...base,
    encode(outcome) {
      const asFailure = outcome.ok && (atomic || (resume && !isFinalFailure(outcome.value)));
      if (!asFailure || !rootFieldFailed(outcome.value)) return base.encode(outcome);
      const result = outcome.value;
      const first = result.errors?.[0] ?? new GraphQLError('[idem] a root field failed');
      const description = { ...errors.describe(first), name: ROLLED_BACK, data: toStoredResult(result) };
      return { kind: 'error', status: description.status, body: JSON.stringify(description) };
    },
    decode(stored) {
      if (stored.kind === 'error') {
        const description: StoredErrorDescription & { data?: StoredExecutionResult } = JSON.parse(stored.body);
        if (description.name === ROLLED_BACK && description.data) return { ok: true, value: description.data };
      }
      return base.decode(stored);
    },
  };
}

/**
 * E8, under `onFailure: 'resume'`: whether a failed result is final — stored and replayed — rather
 * than resumable. It is final when one of its errors was thrown as `finalFailure(error)` (the mark
 * is looked for on the error and on what it wraps: graphql-js wraps what a resolver throws), or
 * when none of them is a server failure: a GraphQLError a resolver throws on purpose is the
 * client's answer (a 4xx in HTTP words), unless its `extensions.http.status` is 500 or more; an
 * unexpected error (a plain `Error`, masked by Yoga and Apollo) is a server failure.
 */
export function isFinalResult({ errors }: ExecutionResult): boolean {
  if (!errors?.length) return false;
  if (errors.some(markedFinal)) return true;
  return !errors.some((error) => unexpectedCause(error) !== undefined || httpStatusOf(error) >= 500);
}

function markedFinal(error: unknown): boolean {
  for (let cause = error, depth = 0; cause !== null && typeof cause === 'object' && depth < 8; depth++) {
    if (isFinalFailure(cause)) return true;
    cause =
      (cause as { originalError?: unknown; cause?: unknown }).originalError ?? (cause as { cause?: unknown }).cause;
  }
  return false;
}

function httpStatusOf(error: GraphQLError): number {
  const status = (error.extensions?.['http'] as { status?: unknown } | undefined)?.status;
  return typeof status === 'number' ? status : 0;
}

/**
 * Atomic mode: whether a root field failed — an error left it null (a resolver threw, or a null
 * propagated up to it), or `data` is null altogether. Errors below a root field that still
 * resolved do not undo it.
 */
export function rootFieldFailed({ data, errors }: ExecutionResult): boolean {
  if (!errors?.length) return false;
  return !data || errors.some((error) => error.path?.[0] === undefined || data[error.path[0]] === null);
}

/**
 * Atomic mode: the result the client gets when a root field failed: the unit was rolled back, so
 * it reports no root field as done.
 */
export function rolledBackResult(result: ExecutionResult): ExecutionResult {
  if (!rootFieldFailed(result)) return result;
  const reportsDone = result.data != null && Object.values(result.data).some((value) => value !== null);
  return reportsDone ? { ...result, data: null } : result;
}
