/**
 * `@idem/core/store` — for store authors: the store contract, its record types and the rules
 * every store shares (`decideClaim` chooses the claim rule). Check a store against the contract
 * with `runStoreConformance` from `@idem/core/conformance`.
 */
export type * from './store.js';
export {
  archivedSteps,
  decideClaim,
  fingerprintsMatch,
  isExpired,
  toTimelineEntry,
  withStep,
  type ClaimDecision,
  type ClaimedRecordView,
} from './store-rules.js';
export { withLocalCache, type LocalCacheOptions } from './local-cache.js';
