/**
 * @idem/envelop — idempotent GraphQL mutations for Envelop and GraphQL Yoga (SPEC K, S, F, E, X3).
 */
export { useIdempotency, type IdempotencyPlugin, type IdempotencyResultExtension } from './plugin.ts';
export { useYogaIdempotency, type YogaIdempotencyHooks } from './yoga.ts';
export type { IdempotencyOptions, FingerprintInput, RequestHeaders, RequiredKeyOption } from './options.ts';
export { idempotentDirective, idempotentDirectiveTypeDefs } from './directive.ts';
export { IdempotentDirectivePlacementRule } from './directive-placement-rule.ts';
export { idempotencyGraphQLError, toGraphQLErrorCode, type IdempotencyErrorExtensions, type IdempotencyGraphQLErrorCode } from './error-mapping.ts';
export type { StoredExecutionResult, StoredGraphQLError } from './stored-result.ts';
// What GraphQL users need from the core without a second import.
export { sharedPrincipal, idempotencyClaim, type ClaimContext, HandlerNotStartedError, IDEMPOTENCY_KEY_HEADER, IDEMPOTENT_REPLAYED_HEADER, type Duration, type FingerprintOption, type IdempotencyErrorCode } from '@idem/core';
