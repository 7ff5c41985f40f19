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
  isResumableError,
  type IdempotencyErrorData,
  type IdempotencyErrorShape,
} from './error-mapping.js';
// E8: a failure a handler declares final under `onFailure: 'resume'` (stored and replayed, never resumed).
export { finalFailure } from '@idem/core/adapter';
// What tRPC users need from the core without a second import (the list is core's, written once).
export * from '@idem/core/essentials';
