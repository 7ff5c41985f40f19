/**
 * Atomic mode over GraphQL: a unit in which a root field failed is rolled back as a whole, yet
 * its result is still stored and replayed as it was (E4).
 */
import type { ExecutionResult } from 'graphql';
import type { ErrorCodec } from '@idem/core';
import { toStoredResult, type StoredExecutionResult } from './stored-result.js';

/**
 * A result in which a root field failed, thrown so that the unit's writes are rolled back. It is
 * stored as the outcome and replayed as the same result: live, an `ExecutionResult`; revived
 * from the store, a {@link StoredExecutionResult}.
 */
export class RolledBackExecution {
  constructor(readonly result: ExecutionResult | StoredExecutionResult) {}
}

const ROLLED_BACK = 'IdempotencyRolledBackExecution';

/**
 * The result a unit's handler returns in atomic mode, or a {@link RolledBackExecution} thrown when
 * a root field failed — an error under it left it null (a resolver threw, or a null propagated up
 * to it), or `data` is null altogether. Errors below a root field that still resolved do not undo
 * the mutation. The client of a rolled-back unit gets its errors, and no root field reported as done.
 */
export function committedOrRolledBack(result: ExecutionResult): ExecutionResult {
  if (!result.errors?.length) return result;
  const data = result.data;
  const failed =
    !data ||
    result.errors.some((error) => {
      const root = error.path?.[0];
      return root === undefined || data[root] === null;
    });
  if (!failed) return result;
  const reportsDone = data != null && Object.values(data).some((value) => value !== null);
  throw new RolledBackExecution(reportsDone ? { ...result, data: null } : result);
}

/** A {@link RolledBackExecution} is stored whole, under the status and code of its first error. */
export function rolledBackCodec(inner: ErrorCodec): ErrorCodec {
  return {
    describe(error) {
      if (!(error instanceof RolledBackExecution)) return inner.describe(error);
      const result = error.result as ExecutionResult;
      return { ...inner.describe(result.errors?.[0] ?? error), name: ROLLED_BACK, data: toStoredResult(result) };
    },
    revive: (description) =>
      description.name === ROLLED_BACK
        ? new RolledBackExecution(description.data as StoredExecutionResult)
        : inner.revive(description),
  };
}
