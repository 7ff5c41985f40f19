/**
 * `@idem/core/store` — for store authors: the store contract, its record types and the rules
 * every store shares. Check a store against the contract with `runStoreConformance` from
 * `@idem/core/conformance`.
 */
export type * from './store.js';
export { isExpired, fingerprintsMatch, toTimelineEntry } from './store-rules.js';
