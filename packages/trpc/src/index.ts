/**
 * @idem/trpc — idempotent tRPC mutations with one middleware (SPEC K, S, F, E, X2).
 */
export { idempotency, type IdempotencyMiddleware } from './middleware.js';
export type { IdempotencyOptions, IdempotencyKeyOptions, IdempotencyKeySource } from './options.js';
export { idempotencyContext, type IdempotencyContext, type IdempotencyContextOptions, type IdempotencyTransport } from './context.js';
export { idempotencyErrorFormatter, idempotencyErrorData, isReplayedError, type IdempotencyErrorData, type IdempotencyErrorShape } from './error-mapping.js';
// What tRPC users need from the core without a second import.
export { sharedPrincipal, idempotencyClaim, type ClaimContext, HandlerNotStartedError, IDEMPOTENCY_KEY_HEADER, IDEMPOTENT_REPLAYED_HEADER, type Duration, type FingerprintOption, type IdempotencyErrorCode } from '@idem/core';
// The client: a @trpc/client link (only types are imported from @trpc/client).
export { idempotencyLink, idempotencyHeaders, type IdempotencyLinkOptions, type IdempotencyLinkKeyOptions, type IdempotencyOperationContext } from './link.js';
export { RetentionWindowExceededError, RetriesExhaustedError, UnresolvedOperationError, loadRetentionPolicy, newIdempotencyKey, type ClientRetryOptions, type RetryNotice } from '@idem/core';
