import { GraphQLError, type ExecutionResult, type Source, type SourceLocation } from 'graphql';
import { OutcomeNotStoredError } from '@idem/core/adapter';
import type { ErrorCodec, StoredErrorDescription } from '@idem/core';

/**
 * A GraphQL error as stored (E4). `unexpected` remembers that the error wrapped something other
 * than a GraphQLError (a plain `throw new Error(...)` in a resolver): error masking (Yoga's
 * `maskedErrors`, Envelop's `useMaskedErrors`) hides those, and must hide the replay too.
 */
export interface StoredGraphQLError {
  message: string;
  locations?: SourceLocation[];
  path?: Array<string | number>;
  extensions?: Record<string, unknown>;
  unexpected?: { name: string };
}

/** What is stored for an operation (its whole result) or a field (its slice of the result). */
export interface StoredExecutionResult {
  data?: Record<string, unknown> | null;
  errors?: StoredGraphQLError[];
}

export function toStoredResult(result: ExecutionResult): StoredExecutionResult {
  const stored: StoredExecutionResult = {};
  // Kept in the result's own key order (graphql-js puts `errors` first), so a replay reads the same.
  for (const key of Object.keys(result)) {
    if (key === 'data' && result.data !== undefined) stored.data = result.data as Record<string, unknown> | null;
    if (key === 'errors' && result.errors?.length) stored.errors = result.errors.map(toStoredError);
  }
  return stored;
}

export function toStoredError(error: GraphQLError): StoredGraphQLError {
  const stored: StoredGraphQLError = { message: error.message };
  if (error.locations?.length) stored.locations = error.locations.map(({ line, column }) => ({ line, column }));
  if (error.path) stored.path = [...error.path];
  if (error.extensions && Object.keys(error.extensions).length > 0) stored.extensions = { ...error.extensions };
  const unexpected = unexpectedCause(error);
  if (unexpected) stored.unexpected = { name: unexpected.name };
  return stored;
}

/**
 * Rebuilds a stored result. Locations are re-anchored on the current request's source, because
 * GraphQL Yoga recomputes them from `source` + `positions` when it serializes errors; a retry
 * sends the same text, so they come out as stored.
 */
export function fromStoredResult(stored: StoredExecutionResult, source: Source | undefined): ExecutionResult {
  const result: ExecutionResult = {};
  for (const key of Object.keys(stored)) {
    if (key === 'data' && stored.data !== undefined) result.data = stored.data;
    if (key === 'errors' && stored.errors?.length)
      result.errors = stored.errors.map((error) => fromStoredError(error, source));
  }
  return result;
}

export function fromStoredError(stored: StoredGraphQLError, source: Source | undefined): GraphQLError {
  const positions = source && stored.locations ? positionsIn(source, stored.locations) : undefined;
  return new GraphQLError(stored.message, {
    ...(positions ? { source, positions } : {}),
    ...(stored.path ? { path: stored.path } : {}),
    ...(stored.extensions ? { extensions: stored.extensions } : {}),
    ...(stored.unexpected ? { originalError: replayedCause(stored) } : {}),
  });
}

/** A field's stored slice, under the response key of this request (a retry may use another alias). */
export function underResponseKey(stored: StoredExecutionResult, responseKey: string): StoredExecutionResult {
  const moved: StoredExecutionResult = {};
  if (stored.data !== undefined)
    moved.data = stored.data === null ? null : { [responseKey]: Object.values(stored.data)[0] ?? null };
  if (stored.errors)
    moved.errors = stored.errors.map((error) =>
      error.path?.length ? { ...error, path: [responseKey, ...error.path.slice(1)] } : error,
    );
  return moved;
}

/**
 * Stores what an execute function threw (rare: graphql-js returns errors rather than throwing),
 * and rebuilds it as a GraphQLError on replay (E4).
 */
export function graphqlErrorCodec(source: Source | undefined): ErrorCodec {
  return {
    describe(error): StoredErrorDescription {
      // The engine's own 500 for an outcome it could not store says the request was executed:
      // a GraphQL error of its own, so that no masking hides it.
      const graphqlError =
        error instanceof OutcomeNotStoredError
          ? new GraphQLError(error.message, {
              extensions: {
                code: 'IDEMPOTENCY_OUTCOME_NOT_STORED',
                http: { status: error.status },
                idempotency: error.data,
              },
            })
          : asGraphQLError(error);
      const http = graphqlError.extensions['http'] as { status?: unknown } | undefined;
      const code = graphqlError.extensions['code'];
      return {
        name: graphqlError.name,
        message: graphqlError.message,
        code: typeof code === 'string' ? code : 'INTERNAL_SERVER_ERROR',
        status: typeof http?.status === 'number' ? http.status : 500,
        data: toStoredError(graphqlError),
      };
    },
    revive: (description) => fromStoredError(description.data as StoredGraphQLError, source),
  };
}

/** A GraphQLError for anything thrown; a non-GraphQL error stays its `originalError`, so masking still applies. */
export function asGraphQLError(error: unknown): GraphQLError {
  if (error instanceof GraphQLError) return error;
  if (error instanceof Error) return new GraphQLError(error.message, { originalError: error });
  return new GraphQLError(String(error), { originalError: new Error(String(error)) });
}

/** The non-GraphQL error a GraphQLError wraps (a plain `throw new Error(…)` in a resolver), if it wraps one. */
export function unexpectedCause(error: GraphQLError): Error | undefined {
  let cause: unknown = error.originalError;
  while (cause instanceof GraphQLError) cause = cause.originalError;
  return cause instanceof Error ? cause : undefined;
}

function replayedCause(stored: StoredGraphQLError): Error {
  const cause = new Error(stored.message);
  // Maskers tell GraphQL errors by their name; the cause must not pass for one.
  cause.name = stored.unexpected?.name === 'GraphQLError' ? 'Error' : (stored.unexpected?.name ?? 'Error');
  return cause;
}

function positionsIn(source: Source, locations: readonly SourceLocation[]): number[] | undefined {
  const lineStarts = [0];
  for (const match of source.body.matchAll(/\r\n|[\n\r]/g)) lineStarts.push(match.index + match[0].length);
  const positions: number[] = [];
  for (const { line, column } of locations) {
    const start = lineStarts[line - 1];
    if (start === undefined) return undefined;
    positions.push(start + column - 1);
  }
  return positions;
}
