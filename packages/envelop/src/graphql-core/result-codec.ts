/**
 * How a GraphQL unit's outcome is stored and replayed (E2, E4): its result, written by the user's
 * serializer (`JSON` or e.g. `superjson`) in the stored shape, replayed as a
 * {@link StoredExecutionResult}; what an execute function threw, as a GraphQLError.
 */
import { GraphQLError, type ExecutionResult, type Source } from 'graphql';
import type { OutcomeSerializer, StoredErrorDescription } from '@idem/core';
import { outcomeCodec, type OutcomeCodec } from '@idem/core/adapter';
import { graphqlErrorCodec, toStoredResult, type StoredExecutionResult } from './stored-result.js';

/** The `name` of a rolled-back unit's stored description: its whole result is in `data`. */
const ROLLED_BACK = 'IdempotencyRolledBackExecution';

/**
 * The codec of one unit. In atomic mode a result in which a root field failed (see
 * {@link rootFieldFailed}) is encoded as an `'error'`, so that the engine rolls the unit's writes
 * back; it is stored whole under the status and code of its first error and replayed as the same
 * result.
 */
export function resultCodec(
  serializer: OutcomeSerializer,
  source: Source | undefined,
  atomic: boolean,
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
      if (!atomic || !outcome.ok || !rootFieldFailed(outcome.value)) return base.encode(outcome);
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
