/**
 * @idem/envelop — idempotent GraphQL mutations for Envelop and GraphQL Yoga (SPEC K, S, F, E, X3).
 */
export { useIdempotency, type IdempotencyPlugin, type IdempotencyResultExtension } from './plugin.js';
export { useYogaIdempotency, type YogaIdempotencyHooks } from './yoga.js';
export type { IdempotencyOptions, FingerprintInput, RequestHeaders, RequiredKeyOption } from './options.js';
export { idempotentDirective, idempotentDirectiveTypeDefs } from './directive.js';
export { IdempotentDirectivePlacementRule } from './directive-placement-rule.js';
export { idempotencyGraphQLError, toGraphQLErrorCode, type IdempotencyErrorExtensions, type IdempotencyGraphQLErrorCode } from './error-mapping.js';
export type { StoredExecutionResult, StoredGraphQLError } from './stored-result.js';
// What GraphQL users need from the core without a second import.
export { sharedPrincipal, idempotencyClaim, type ClaimContext, HandlerNotStartedError, IDEMPOTENCY_KEY_HEADER, IDEMPOTENT_REPLAYED_HEADER, type Duration, type FingerprintOption, type IdempotencyErrorCode } from '@idem/core';
