export * from './errors.ts';
export * from './key.ts';
export * from './fingerprint.ts';
export * from './duration.ts';
export * from './outcome.ts';
export type * from './events.ts';
export type * from './store.ts';
export { MemoryStore, fingerprintsMatch, toTimelineEntry, type MemoryStoreOptions } from './memory-store.ts';
export {
  createEngine,
  deriveKey,
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
} from './engine.ts';
export { sharedPrincipal, createAdapterEngine, type AdapterOptions } from './adapter-options.ts';
export { createPolicyDocument, renderPolicyHtml, type EndpointPolicyDescription, type PolicyDocument } from './policy.ts';
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
} from './client-retry.ts';
