/**
 * `@idem/core` — what an application calls: the engine, its errors and events, key and
 * fingerprint helpers, the memory store and the published policy. Other entries:
 * `@idem/core/client` (retries within the retention, for clients), `@idem/core/store` (the
 * store contract, for store authors), `@idem/core/adapter` (the per-request pipeline, for
 * adapter authors), `@idem/core/otel` (OpenTelemetry metrics and span attributes from the events)
 * and `@idem/core/conformance` (the store conformance suite, with vitest).
 */

// The engine.
export {
  createEngine,
  formatScope,
  type AtomicClaimContext,
  type EndpointPolicy,
  type EngineOptions,
  type ExecuteRequest,
  type ExecuteResult,
  type IdempotencyEngine,
} from './engine.js';
export { idempotencyClaim, deriveKey, type ClaimContext, type ClaimCarrier } from './claim.js';
export { notStarted, HandlerNotStartedError } from './not-started.js';
export { LeaseLostError, type LeaseLossReason } from './lease.js';
export { sharedPrincipal } from './adapter.js';
export { MAX_SCOPE_BYTES } from './scope.js';
export type { IdempotencyStore } from './store.js';
export { MemoryStore, type MemoryStoreOptions } from './memory-store.js';
export {
  combineEventHandlers,
  type IdempotencyEvent,
  type IdempotencyEventHandler,
  type IdempotencyEventType,
  type KeyedIdempotencyEvent,
  type UnkeyedEvent,
  type ExpiredGeneration,
  type StoreOperation,
} from './events.js';

// The key-status lookup: a caller reconciles its key instead of retrying it (R2, A1, S1).
export {
  createKeyStatusLookup,
  lookUpKeyStatus,
  parseKeyStatusQuery,
  KeyStatusQueryError,
  SharedPrincipalLookupError,
  MAX_OPERATION_LENGTH,
  type KeyStatusDocument,
  type KeyGenerationStatus,
  type KeyGenerationState,
  type KeyStatusLookupOptions,
  type KeyStatusOptions,
  type KeyStatusQuery,
  type KeyStatusTarget,
  type StoredOutcomeValue,
} from './key-status.js';
export { MASKED_ERROR_MESSAGE, maskStoredError, maskStoredOutcome, maskStoredValue } from './outcome-mask.js';

// Errors (X1) and how outcomes are stored (E2, E4).
export {
  IdempotencyError,
  MissingKeyError,
  InvalidKeyError,
  AmbiguousKeyError,
  InputTooDeepError,
  ScopeTooLongError,
  RequestInProgressError,
  FingerprintMismatchError,
  KeyExpiredError,
  StoreConfigurationError,
  StoreUnavailableError,
  isIdempotencyError,
  type IdempotencyErrorCode,
  type InvalidKeyReason,
  type ProblemDetails,
} from './errors.js';
export {
  defaultErrorCodec,
  ReplayedError,
  OutcomeNotStoredError,
  OutcomeTooLargeError,
  type ErrorCodec,
  type OutcomeSerializer,
  type StoredErrorDescription,
} from './outcome.js';

// Keys (K1–K4) and fingerprints (F1, F2).
export {
  parseIdempotencyKey,
  formatIdempotencyKey,
  validateKey,
  MAX_KEY_LENGTH,
  IDEMPOTENCY_KEY_HEADER,
  IDEMPOTENT_REPLAYED_HEADER,
} from './key.js';
export {
  canonicalize,
  defaultFingerprint,
  computeFingerprint,
  fingerprintFormatVersion,
  FINGERPRINT_FORMAT_VERSION,
  MAX_FINGERPRINT_DEPTH,
  type FingerprintOption,
} from './fingerprint.js';
export { toMilliseconds, formatDuration, type Duration } from './duration.js';

// The published policy (R4).
export {
  createPolicyDocument,
  describeEndpoint,
  renderPolicyHtml,
  type EndpointPolicyDescription,
  type PolicyDocument,
  type PublishedEndpoint,
} from './policy.js';
export { createPolicyHandler, prefersJson, type PolicyHandlerOptions } from './policy-handler.js';
export { resolveDocumentationUrl, requestUrlOf } from './documentation-url.js';
export { escapeHtml } from './html.js';

// CORS for browser clients on another origin: the headers idem reads and sets.
export {
  idempotencyCors,
  idempotencyCorsHeaders,
  IDEMPOTENCY_CORS_ALLOWED_HEADERS,
  IDEMPOTENCY_CORS_EXPOSED_HEADERS,
  type CorsPackageOptions,
  type CorsRequestLike,
  type IdempotencyCorsConfiguration,
  type IdempotencyCorsOptions,
  type YogaCorsDecision,
} from './cors.js';
