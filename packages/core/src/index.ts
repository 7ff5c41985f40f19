/**
 * `@idem/core` — what an application calls: the engine, its errors and events, key and
 * fingerprint helpers, the memory store and the published policy document. An explicit list,
 * at most 40 runtime names (test/entries.test.ts counts them). Other entries:
 * `@idem/core/http` (CORS, the policy page and handler, documentation URLs, HTML escaping),
 * `@idem/core/key-status` (the key-status lookup and the masking of stored outcomes),
 * `@idem/core/client` (retries within the retention, for clients), `@idem/core/store` (the
 * store contract, for store authors), `@idem/core/adapter` (the per-request pipeline and the
 * outcome protocol, for adapter authors), `@idem/core/essentials` (what every adapter
 * re-exports for its users), `@idem/core/otel` (OpenTelemetry metrics and span attributes from
 * the events) and `@idem/core/conformance` (the store conformance suite, with vitest).
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
export { sharedPrincipal } from './scope.js';
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
  ReplayedError,
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

// The published policy (R4); its page and handler are on `@idem/core/http`.
export {
  createPolicyDocument,
  describeEndpoint,
  type EndpointPolicyDescription,
  type PolicyDocument,
  type PublishedEndpoint,
} from './policy.js';
