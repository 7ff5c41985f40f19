/**
 * @idem/envelop — idempotent GraphQL mutations for Envelop and GraphQL Yoga (SPEC K, S, F, E, X3).
 * The `fetch` for GraphQL clients is on its own entry, `@idem/envelop/client`.
 */
export { useIdempotency, type IdempotencyPlugin } from './plugin.js';
export type { IdempotencyResultExtension } from './graphql-core/field-unit.js';
export { useYogaIdempotency, type YogaIdempotencyHooks, type YogaIdempotencyOptions } from './yoga.js';
export { DEFAULT_PREFLIGHT_HEADERS, type CsrfPreventionOptions } from './yoga.js';
export type {
  IdempotencyOptions,
  GraphQLKeyOptions,
  FingerprintInput,
  RequestHeaders,
} from './graphql-core/options.js';
export {
  idempotentDirective,
  idempotentDirectiveTypeDefs,
  IdempotentDirectivePlacementRule,
} from './graphql-core/directive.js';
export {
  idempotencyKeyStatusTypeDefs,
  idempotencyKeyStatusResolver,
  createGraphQLKeyStatusLookup,
  keyStatusUnits,
  IDEMPOTENCY_KEY_STATUS_FIELD,
  type KeyStatusResolverOptions,
} from './key-status.js';
export type { IdempotencyErrorExtensions, IdempotencyGraphQLErrorCode } from './graphql-core/error-mapping.js';
export type { StoredExecutionResult, StoredGraphQLError } from './graphql-core/stored-result.js';
// E8: a failure a handler declares final under `onFailure: 'resume'` (stored and replayed, never resumed).
export { finalFailure } from '@idem/core/adapter';
// What GraphQL users need from the core without a second import (the list is core's, written once).
export * from '@idem/core/essentials';
