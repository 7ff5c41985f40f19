/**
 * `@idem/core/essentials` — what an application using one of the adapters needs from the core
 * without a second import, written once: every adapter package re-exports this entry
 * (`export * from '@idem/core/essentials'`), so `@idem/trpc`, `@idem/envelop`, `@idem/fetch` and
 * `@idem/apollo-server` hand their users the same names.
 */
export { sharedPrincipal } from './scope.js';
export { idempotencyClaim, type ClaimContext } from './claim.js';
export { notStarted } from './not-started.js';
export type { Duration } from './duration.js';
export type { FingerprintOption } from './fingerprint.js';
export type { IdempotencyErrorCode } from './errors.js';
export type { KeyGenerationStatus, KeyStatusDocument } from './client-retry.js';
export type { KeyOptions } from './key.js';
export type { RequiredOption } from './adapter.js';
