/**
 * @idem/trpc — idempotent tRPC mutations with one middleware (SPEC K, S, F, E, X2).
 */
export { idempotency, type IdempotencyMiddleware } from './middleware.ts';
export type { IdempotencyOptions, IdempotencyKeyOptions, IdempotencyKeySource } from './options.ts';
export { idempotencyContext, type IdempotencyContext, type IdempotencyContextOptions, type IdempotencyTransport } from './context.ts';
export { idempotencyErrorFormatter, idempotencyErrorData, type IdempotencyErrorData, type IdempotencyErrorShape } from './error-mapping.ts';
// What tRPC users need from the core without a second import.
export { sharedPrincipal, idempotencyClaim, type ClaimContext, HandlerNotStartedError, IDEMPOTENCY_KEY_HEADER, IDEMPOTENT_REPLAYED_HEADER, type Duration, type FingerprintOption, type IdempotencyErrorCode } from '@idem/core';
