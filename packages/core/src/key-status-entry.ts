/**
 * `@idem/core/key-status` — the key-status lookup (R2, A1, S1): a caller reconciles its key
 * instead of retrying it. The adapters serve it (`idempotencyStatusProcedure`, `keyStatusRoute`,
 * the GraphQL status field); build your own route on these, and show stored outcomes only
 * through the one masking rule (`maskStoredOutcome`).
 */
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
