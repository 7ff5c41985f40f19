/**
 * @idem/trpc — idempotent tRPC mutations with one middleware (SPEC K, S, F, E, X2). The client
 * link is on its own entry, `@idem/trpc/client`.
 */
export { idempotency, type IdempotencyMiddleware } from './middleware.js';
export type { IdempotencyOptions } from './options.js';
export { idempotencyStatusProcedure, type IdempotencyStatusOptions } from './status.js';
export {
  idempotencyContext,
  type IdempotencyContext,
  type IdempotencyContextOptions,
  type IdempotencyTransport,
} from './context.js';
export {
  idempotencyErrorFormatter,
  idempotencyErrorData,
  isReplayedError,
  type IdempotencyErrorData,
  type IdempotencyErrorShape,
} from './error-mapping.js';
// What tRPC users need from the core without a second import.
export {
  sharedPrincipal,
  idempotencyClaim,
  notStarted,
  type ClaimContext,
  type Duration,
  type FingerprintOption,
  type IdempotencyErrorCode,
  type KeyStatusDocument,
  type KeyGenerationStatus,
} from '@idem/core';
export type { KeyOptions, RequiredOption } from '@idem/core/adapter';
