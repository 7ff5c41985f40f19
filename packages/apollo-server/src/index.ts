/**
 * @idem/apollo-server — idempotent GraphQL mutations for Apollo Server 5 (SPEC K, S, F, E, X3):
 * `startStandaloneServer`, `@as-integrations/express5` and NestJS's `ApolloDriver`. A thin
 * translator of Apollo's plugin hooks to `@idem/envelop/graphql-core`, the GraphQL core that the
 * Envelop and Yoga plugins use too: the same key plan, unit, stored result and refusals.
 */
import { HeaderMap, type ApolloServerPlugin, type BaseContext, type GraphQLResponse } from '@apollo/server';
import {
  execute as graphqlExecute,
  GraphQLError,
  validate,
  type ExecutionArgs,
  type ExecutionResult,
  type GraphQLFormattedError,
  type GraphQLSchema,
} from 'graphql';
import { IDEMPOTENT_RESUMABLE_HEADER } from '@idem/core/adapter';
import {
  IDEMPOTENT_REPLAYED_HEADER,
  type ClaimContext,
  type EndpointPolicyDescription,
  type IdempotencyEngine,
} from '@idem/core';
import {
  createGraphQLIdempotency,
  isReplayedResult,
  isResumableResult,
  type ExecuteFn,
  type IdempotencyOptions,
} from '@idem/envelop/graphql-core';

export {
  idempotentDirective,
  idempotentDirectiveTypeDefs,
  IdempotentDirectivePlacementRule,
  type GraphQLKeyOptions,
  type FingerprintInput,
  type RequestHeaders,
  type IdempotencyResultExtension,
  type IdempotencyErrorExtensions,
  type IdempotencyGraphQLErrorCode,
} from '@idem/envelop/graphql-core';
// E8: a failure a handler declares final under `onFailure: 'resume'` (stored and replayed, never resumed).
export { finalFailure } from '@idem/core/adapter';
// What Apollo Server users need from the core without a second import (the list is core's, written once).
export * from '@idem/core/essentials';

/**
 * Options of {@link useApolloIdempotency}: those of `useIdempotency` (`store`, `principal`,
 * `required`, `key`, `fingerprint`, `atomic`, `policy`, `retention`, `lease`, …). `getHeaders`
 * defaults to the headers of Apollo's own HTTP request (`requestContext.request.http.headers`).
 */
export interface ApolloIdempotencyOptions<TContext extends BaseContext = BaseContext, TTx = unknown>
  extends IdempotencyOptions<TContext, TTx> {
  /**
   * The root value idempotent mutations execute with: Apollo Server does not show a plugin its
   * `rootValue` option, so pass the same one here if you set it. Defaults to `undefined`.
   */
  rootValue?: unknown;
  /**
   * Apollo Server's `formatError`, for the errors of idempotent mutations (live and replayed):
   * Apollo does not format a response a plugin gives, so pass the same function here if you set
   * one (to mask unexpected errors, for instance). Defaults to none.
   */
  formatError?: (formattedError: GraphQLFormattedError, error: unknown) => GraphQLFormattedError;
}

/** The Apollo Server plugin, with the engine it runs on, `claim(context)` and `describeEndpoints()` (R4). */
export interface ApolloIdempotencyPlugin<TContext extends BaseContext = BaseContext, TTx = unknown>
  extends ApolloServerPlugin<TContext> {
  /** `engine.drain()` on shutdown waits for outcome writes being retried (E7). */
  readonly engine: IdempotencyEngine<TTx>;
  /** `idempotencyClaim(context)` with the store's transaction type, for resolvers in atomic mode. */
  claim(context: unknown): ClaimContext<TTx> | undefined;
  /**
   * R4: one entry per root mutation field of `schema` (defaults to the schema the server started with).
   * @throws TypeError `[idem] …` when no schema is given and the server has not started.
   */
  describeEndpoints(schema?: GraphQLSchema): EndpointPolicyDescription[];
}

interface HttpRequest {
  headers: HeaderMap;
  search?: string;
}

/**
 * Idempotent GraphQL mutations on Apollo Server 5 (`plugins: [useApolloIdempotency(options)]`),
 * with the vocabulary and rules of `useYogaIdempotency`:
 *
 * - `Idempotency-Key` header → the mutation operation is one record, executed once;
 * - `idempotencyKey` argument or `@idempotent(key:)` → each root field is its own record;
 * - a refusal answers with its status through Apollo's `response.http` (409 + `Retry-After`,
 *   422, 400, 503) and `extensions.code` / `extensions.idempotency` (the problem, `type` link);
 *   a replay answers `Idempotent-Replayed: true`; under `onFailure: 'resume'` (E8), a failure that
 *   left its key resumable answers `Idempotent-Resumable: true` (and `extensions.idempotency.resumable`);
 * - with `allowBatchedHttpRequests`, an `Idempotency-Key` header on a batch is refused with 400
 *   `IDEMPOTENCY_KEY_AMBIGUOUS` (one header key identifies one operation).
 *
 * It runs mutation operations itself in `responseForOperation` (graphql-js `execute` under the
 * claims); queries and subscriptions go through Apollo's own execution. On those mutations
 * Apollo's own `formatError` and `rootValue` are not applied (pass them here) and plugins'
 * `executionDidStart`/`willResolveField` hooks do not run.
 */
export function useApolloIdempotency<TContext extends BaseContext = BaseContext, TTx = unknown>(
  options: ApolloIdempotencyOptions<TContext, TTx>,
): ApolloIdempotencyPlugin<TContext, TTx> {
  const { rootValue, formatError, ...coreOptions } = options;
  /** The HTTP request each GraphQL context was built for (Apollo keeps it beside the context, not in it). */
  const requests = new WeakMap<object, HttpRequest>();
  /** How many operations share one HTTP request's headers: more than one is a batch. */
  const operations = new WeakMap<object, number>();
  const core = createGraphQLIdempotency<TContext, TTx>(coreOptions, {
    name: 'useApolloIdempotency',
    requestOf: (context) => (isObject(context) ? requests.get(context) : undefined),
    batchedMutations(context) {
      const headers = isObject(context) ? requests.get(context)?.headers : undefined;
      const count = headers ? operations.get(headers) : undefined;
      return count !== undefined && count > 1 ? count : undefined;
    },
  });

  return {
    engine: core.engine,
    claim: core.claim,
    describeEndpoints: core.describeEndpoints,
    async serverWillStart({ schema }) {
      core.prepareSchema(schema);
      return {
        schemaDidLoadOrUpdate({ apiSchema }) {
          core.prepareSchema(apiSchema);
        },
      };
    },
    async requestDidStart({ request, contextValue }) {
      const http = request.http as HttpRequest | undefined;
      if (http) {
        // Every operation of a batch shares the batch's headers (Apollo's httpBatching) and
        // starts before any of them reaches `responseForOperation`.
        operations.set(http.headers, (operations.get(http.headers) ?? 0) + 1);
        if (isObject(contextValue)) requests.set(contextValue, http);
      }
      return {
        async responseForOperation(requestContext) {
          const { operation, schema, document } = requestContext;
          if (operation.operation !== 'mutation') return null;
          const invalid = core.validationRules.length > 0 ? validate(schema, document, core.validationRules) : [];
          if (invalid.length > 0) return toResponse({ errors: invalid }, formatError, 400);
          core.prepareSchema(schema);
          const args: ExecutionArgs = {
            schema,
            document,
            rootValue,
            contextValue: requestContext.contextValue,
            variableValues: requestContext.request.variables,
            operationName: requestContext.request.operationName,
          };
          const result = (await core.execute(args, graphqlExecute as ExecuteFn)) as ExecutionResult;
          return toResponse(result, formatError);
        },
      };
    },
  };
}

/**
 * An execution result as Apollo Server answers one: errors formatted as Apollo formats them
 * (`extensions.code` defaults to `INTERNAL_SERVER_ERROR`), their `extensions.http` turned into
 * the response's status and headers, `Idempotent-Replayed: true` on a replay (E2), and
 * `Idempotent-Resumable: true` on a failure that left its key resumable (E8).
 */
function toResponse(
  result: ExecutionResult,
  formatError: ApolloIdempotencyOptions['formatError'],
  status?: number,
): GraphQLResponse {
  const headers = new HeaderMap();
  let httpStatus = status;
  const errors = result.errors?.map((error): GraphQLFormattedError => {
    const graphqlError = error instanceof GraphQLError ? error : new GraphQLError(String(error));
    const { http, ...extensions } = graphqlError.extensions as {
      http?: { status?: number; headers?: Record<string, string> };
    } & Record<string, unknown>;
    if (http?.status) httpStatus = http.status;
    for (const [name, value] of Object.entries(http?.headers ?? {})) headers.set(name.toLowerCase(), value);
    const formatted: GraphQLFormattedError = {
      ...graphqlError.toJSON(),
      extensions: { ...extensions, code: extensions['code'] ?? 'INTERNAL_SERVER_ERROR' },
    };
    return formatError ? formatError(formatted, error) : formatted;
  });
  // As Apollo's `status400ForVariableCoercionErrors`: a request it executed nothing of is a 400.
  if (httpStatus === undefined && errors?.length && result.data === undefined) httpStatus = 400;
  if (isReplayedResult(result)) headers.set(IDEMPOTENT_REPLAYED_HEADER.toLowerCase(), 'true');
  else if (isResumableResult(result)) headers.set(IDEMPOTENT_RESUMABLE_HEADER.toLowerCase(), 'true');
  return {
    http: { status: httpStatus, headers },
    body: {
      kind: 'single',
      singleResult: {
        ...(errors ? { errors } : {}),
        ...('data' in result ? { data: result.data } : {}),
        ...(result.extensions ? { extensions: result.extensions } : {}),
      },
    },
  };
}

function isObject(value: unknown): value is object {
  return typeof value === 'object' && value !== null;
}
