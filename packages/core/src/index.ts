export * from './errors.js';
export { resolveDocumentationUrl, requestUrlOf } from './documentation-url.js';
export * from './key.js';
export * from './fingerprint.js';
export * from './duration.js';
export * from './outcome.js';
export type * from './events.js';
export type * from './store.js';
export { MemoryStore, fingerprintsMatch, isExpired, toTimelineEntry, type MemoryStoreOptions } from './memory-store.js';
export {
  createEngine,
  deriveKey,
  claimForPart,
  idempotencyClaim,
  attachClaim,
  claimContextFields,
  formatScope,
  HandlerNotStartedError,
  DEFAULT_LEASE,
  DEFAULT_RETENTION,
  DEFAULT_MAX_STORED_BYTES,
  type ClaimContext,
  type EndpointPolicy,
  type EngineOptions,
  type ExecuteRequest,
  type ExecuteResult,
  type IdempotencyEngine,
} from './engine.js';
export { sharedPrincipal, createAdapterEngine, type AdapterOptions } from './adapter-options.js';
export { createPolicyDocument, renderPolicyHtml, type EndpointPolicyDescription, type PolicyDocument } from './policy.js';
export {
  idempotencyCors,
  idempotencyCorsHeaders,
  IDEMPOTENCY_CORS_ALLOWED_HEADERS,
  IDEMPOTENCY_CORS_EXPOSED_HEADERS,
  type CorsRequestLike,
  type IdempotencyCorsConfiguration,
  type IdempotencyCorsOptions,
} from './cors.js';
export {
  retryWithinRetention,
  retryDeadline,
  defaultSafetyMargin,
  loadRetentionPolicy,
  createRetentionResolver,
  newIdempotencyKey,
  parseRetryAfter,
  UnresolvedOperationError,
  RetentionWindowExceededError,
  RetriesExhaustedError,
  DEFAULT_MAX_ATTEMPTS,
  DEFAULT_INITIAL_DELAY_MS,
  DEFAULT_MAX_DELAY_MS,
  type AttemptResult,
  type ClientRetryErrorCode,
  type ClientRetryOptions,
  type PolicyTransport,
  type RetentionLookup,
  type RetentionSourceOptions,
  type RetryNotice,
  type RetryReason,
  type RetryWithinRetentionOptions,
} from './client-retry.js';
