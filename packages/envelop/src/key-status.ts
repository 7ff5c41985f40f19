/**
 * The key-status lookup in GraphQL: a `Query.idempotencyKeyStatus(key, operation)` field that
 * answers what became of one of the caller's keys, so that a client past the retention
 * reconciles instead of retrying (SPEC R2, A1, S1). Add its type definitions to your schema and
 * its resolver to your resolvers, with the options of your idempotency plugin (same store, same
 * principal). `@idem/envelop/client`, `/apollo` and `/urql` query it in `reconcile`.
 */
import { GraphQLError } from 'graphql';
import {
  createKeyStatusLookup,
  KeyStatusQueryError,
  parseKeyStatusQuery,
  SharedPrincipalLookupError,
  type KeyStatusDocument,
  type KeyStatusLookupOptions,
  type KeyStatusQuery,
} from '@idem/core/key-status';
import { isIdempotencyError } from '@idem/core';
import { requestUrlOf, resolveDocumentationUrl } from '@idem/core/http';
import { idempotencyGraphQLError } from './graphql-core/error-mapping.js';

/** The field's name in `Query`, and where the clients' `reconcile` looks by default. */
export const IDEMPOTENCY_KEY_STATUS_FIELD = 'idempotencyKeyStatus';

/**
 * The type definitions of the field: add them to your schema's (they extend your `Query`).
 * Timestamps are ISO 8601 strings; `outcome` is the stored outcome as JSON text
 * (`{"kind":"success","value":…}` or `{"kind":"error","error":…}`), only while it is replayable.
 */
export const idempotencyKeyStatusTypeDefs = /* GraphQL */ `
  "What became of one generation of an idempotency key."
  enum IdempotencyKeyState {
    processing
    completed
    expired
    released
    archived
  }

  "One generation of an idempotency key: the first use, or a reuse after its retention."
  type IdempotencyKeyGeneration {
    generation: Int!
    "The unit the record belongs to: Mutation.<field> for a key argument, mutation:<fields> for a header key."
    operation: String!
    state: IdempotencyKeyState!
    firstSeenAt: String!
    completedAt: String
    expiresAt: String!
    archivedAt: String
    reusedAt: String
    "The outcome's HTTP-equivalent status; null when none was stored."
    status: Int
    outcomeKind: String
    "How many duplicates waited for this generation's outcome instead of answering 409."
    waits: Int!
    "Whether a retry with this key now would replay the stored outcome."
    replayable: Boolean!
    "The stored outcome as JSON text, only while replayable."
    outcome: String
  }

  "Every generation of one of the caller's keys."
  type IdempotencyKeyStatus {
    key: String!
    operation: String!
    generations: [IdempotencyKeyGeneration!]!
  }

  extend type Query {
    "What became of the caller's key on an operation (Mutation.<field>): null when the caller has no record of it."
    ${IDEMPOTENCY_KEY_STATUS_FIELD}(key: String!, operation: String!): IdempotencyKeyStatus
  }
`;

/**
 * The units whose records a status query for `operation` reads (S1): the plugin keeps a key
 * given as an argument of `createPayment` under `Mutation.createPayment`, and a header key over
 * an operation whose only root field is `createPayment` under `mutation:createPayment`; both are
 * the caller's uses of the key on that field. `mutation:<fields>` (a header key over several
 * fields, sorted, comma-separated) is read as it is.
 */
export function keyStatusUnits(operation: string): string[] {
  const field = /^[A-Za-z_][A-Za-z0-9_]*\.([A-Za-z_][A-Za-z0-9_]*)$/.exec(operation)?.[1];
  return field === undefined ? [operation] : [`mutation:${field}`, operation];
}

/** Options of {@link idempotencyKeyStatusResolver}: your plugin's `store`, `principal` and `serializer`, and these. */
export interface KeyStatusResolverOptions<TContext> extends KeyStatusLookupOptions<TContext> {
  /** The plugin's `documentationUrl`, linked from the problem of a refused query. Defaults to `'/idempotency'`. */
  documentationUrl?: string;
}

/**
 * The lookup behind the field, for other transports (a plain HTTP route): `query.operation` is
 * `Mutation.<field>` or `mutation:<fields>`. Stored results are presented as a masked replay
 * would be (`maskStoredOutcome` of `@idem/core`, as every lookup): the message of an error that
 * was not a GraphQLError is `Unexpected error.`.
 */
export function createGraphQLKeyStatusLookup<TContext>(
  options: KeyStatusLookupOptions<TContext>,
): (context: TContext, query: KeyStatusQuery) => Promise<KeyStatusDocument | null> {
  return createKeyStatusLookup(options, keyStatusUnits);
}

/**
 * The resolver of `Query.idempotencyKeyStatus`. A malformed key (K1–K3) or operation is a
 * `GraphQLError` with `extensions.http.status` 400 (GraphQL Yoga answers 400); an unknown key and
 * another principal's key both resolve to `null`.
 *
 * ```ts
 * const options = { store, principal: (ctx) => ctx.user.id };
 * createYoga({ schema: createSchema({
 *   typeDefs: [typeDefs, idempotencyKeyStatusTypeDefs],
 *   resolvers: { Query: { idempotencyKeyStatus: idempotencyKeyStatusResolver(options) }, Mutation: { … } },
 * }), plugins: [useYogaIdempotency(options)] });
 * ```
 *
 * @throws TypeError `[idem] …` at once when `store` or `principal` is missing.
 */
export function idempotencyKeyStatusResolver<TContext>({
  documentationUrl = '/idempotency',
  ...options
}: KeyStatusResolverOptions<TContext>) {
  const lookUp = createGraphQLKeyStatusLookup(options);
  return async (_root: unknown, args: { key: string; operation: string }, context: TContext) => {
    let query: KeyStatusQuery;
    try {
      query = parseKeyStatusQuery(args);
    } catch (error) {
      const requestUrl = requestUrlOf((context as { request?: unknown } | null)?.request);
      if (isIdempotencyError(error))
        throw idempotencyGraphQLError(error, {
          problem: error.toProblem(resolveDocumentationUrl(documentationUrl, requestUrl)),
        });
      if (error instanceof KeyStatusQueryError)
        throw new GraphQLError(error.message, {
          extensions: { code: error.code.toUpperCase(), http: { status: error.status } },
        });
      throw error;
    }
    let status: KeyStatusDocument | null;
    try {
      status = await lookUp(context, query);
    } catch (error) {
      if (!(error instanceof SharedPrincipalLookupError)) throw error;
      const requestUrl = requestUrlOf((context as { request?: unknown } | null)?.request);
      const problem = error.toProblem(resolveDocumentationUrl(documentationUrl, requestUrl));
      throw new GraphQLError(error.message, {
        extensions: { code: error.code.toUpperCase(), http: { status: error.status }, problem },
      });
    }
    if (!status) return null;
    return {
      ...status,
      generations: status.generations.map(({ outcome, ...generation }) => ({
        ...generation,
        outcome: outcome === undefined ? null : JSON.stringify(outcome),
      })),
    };
  };
}
