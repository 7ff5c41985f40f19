import { GraphQLError, type ASTNode } from 'graphql';
import type { IdempotencyError, IdempotencyErrorCode, ProblemDetails } from '@idem/core';

/**
 * `extensions.code` of an idempotency error: the core's stable code in GraphQL's upper-case
 * convention (`idempotency_request_in_progress` → `IDEMPOTENCY_REQUEST_IN_PROGRESS`). The
 * core code itself is `extensions.idempotency.code`.
 */
export type IdempotencyGraphQLErrorCode = Uppercase<IdempotencyErrorCode>;

/** The `extensions` of a GraphQLError built from an idempotency error (X3). */
export interface IdempotencyErrorExtensions {
  code: IdempotencyGraphQLErrorCode;
  /**
   * Read by GraphQL Yoga for the response status and headers, then left out of the body.
   * Absent on a field-unit error when other root fields of the operation ran (the response is
   * then 200 and the error stays per field).
   */
  http?: { status: number; headers?: Record<string, string> };
  /** The RFC 9457 problem: `type` (documentation URL), `title`, `status`, `detail`, `code`, `retryAfter`. */
  idempotency: ProblemDetails;
}

export function toGraphQLErrorCode(code: IdempotencyErrorCode): IdempotencyGraphQLErrorCode {
  return code.toUpperCase() as IdempotencyGraphQLErrorCode;
}

/**
 * X3: an idempotency error as a GraphQLError carrying `extensions.code`, `extensions.http`
 * (status and `Retry-After`) and its problem body (`AdapterKit.problem`). It has no `originalError`, so error masking
 * leaves it as it is.
 */
export function idempotencyGraphQLError(
  error: IdempotencyError,
  options: {
    problem: ProblemDetails;
    nodes?: readonly ASTNode[];
    path?: ReadonlyArray<string | number>;
    http?: boolean;
  },
): GraphQLError {
  const { problem, nodes, path, http = true } = options;
  const extensions: IdempotencyErrorExtensions = { code: toGraphQLErrorCode(error.code), idempotency: problem };
  if (http) {
    const headers = error.headers();
    extensions.http = Object.keys(headers).length > 0 ? { status: error.status, headers } : { status: error.status };
  }
  return new GraphQLError(error.message, {
    ...(nodes ? { nodes } : {}),
    ...(path ? { path } : {}),
    extensions: { ...extensions },
  });
}
