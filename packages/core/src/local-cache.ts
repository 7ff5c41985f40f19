/**
 * `withLocalCache`: a store decorator that answers the replay of a completed record from this
 * process's memory, without a round trip, until the record's own expiry (as Powertools'
 * `useLocalCache`). Opt-in; nothing durable changes: claims, completions and every other call go
 * to the store as before, and only an answer the store already gave is given again.
 */
import type { ClaimRequest, ClaimResult, IdempotencyRecord, IdempotencyStore } from './store.js';
import { decideClaim } from './store-rules.js';

export interface LocalCacheOptions {
  /**
   * The most completed records kept; the least recently replayed goes first. Defaults to 1000.
   */
  maxEntries?: number;
  /**
   * This process's monotonic clock, in milliseconds, used to bound how far the store's clock can
   * have moved since a record was read. Defaults to `performance.now`. Tests that drive a store's
   * clock by hand pass the same clock here.
   */
  now?: () => number;
}

interface Entry {
  record: IdempotencyRecord;
  /** The store's clock in the answer the record came with (epoch ms). */
  storeNow: number;
  /** `now()` when the claim that read it was sent: the store's clock read it no earlier. */
  sentAt: number;
}

/**
 * Wraps `store` so that a claim of a key whose live record this process already read as
 * `completed` is answered from memory, through the same `decideClaim` rules the store applies:
 * a different fingerprint still gets 422, and a record is served only while the store's clock,
 * bounded from above by the clock read with the record plus the time elapsed here since that
 * claim was sent, is before its `expiresAt`. A record expired there is never served: the claim
 * goes to the store, which archives and reuses it (R2) or answers it expired.
 *
 * Safe because a completed record does not change until it expires (R1): no claim, completion,
 * renewal or release writes to it before then, and the sweeper archives only expired records
 * (`countWait` may still add to its `waits`, which no claim's answer reads).
 * Rows changed by hand (a manual `DELETE`) are not seen until the entry expires or is evicted.
 * Records are cached when a claim answers them `existing` and `completed` (the first replay
 * reads the store; the next ones do not); a record is never cached from this process's own
 * completion. Every other method is the store's own, unchanged; the result is typed as `store`.
 */
export function withLocalCache<S extends Pick<IdempotencyStore, 'claim'>>(
  store: S,
  { maxEntries = 1000, now = () => performance.now() }: LocalCacheOptions = {},
): S {
  if (!Number.isInteger(maxEntries) || maxEntries < 1)
    throw new RangeError(`[idem] withLocalCache: maxEntries must be a positive integer, got ${maxEntries}`);
  // Map keeps insertion order: the first entry is the least recently used.
  const entries = new Map<string, Entry>();
  const idOf = (scope: string, key: string) => `${scope.length}:${scope}${key}`;

  async function claim(request: ClaimRequest): Promise<ClaimResult> {
    const id = idOf(request.scope, request.key);
    const cached = entries.get(id);
    if (cached) {
      const storeNow = cached.storeNow + (now() - cached.sentAt);
      const decision = decideClaim(cached.record, request, storeNow);
      if (decision.rule === 'existing' && !decision.expired) {
        entries.delete(id);
        entries.set(id, cached);
        return { outcome: 'existing', record: copy(cached.record), now: new Date(storeNow), expired: false };
      }
      entries.delete(id);
    }
    const sentAt = now();
    const result = await store.claim(request);
    if (result.outcome === 'existing' && !result.expired && result.record.state === 'completed') {
      entries.set(id, { record: copy(result.record), storeNow: result.now.getTime(), sentAt });
      if (entries.size > maxEntries) entries.delete(entries.keys().next().value as string);
    }
    return result;
  }

  const bound = new Map<PropertyKey, unknown>();
  return new Proxy(store, {
    get(target, property) {
      if (property === 'claim') return claim;
      const value = Reflect.get(target, property, target);
      if (typeof value !== 'function') return value;
      // Methods run on the store itself (a class's private fields need `this` to be it).
      let method = bound.get(property);
      if (!method) {
        method = value.bind(target);
        bound.set(property, method);
      }
      return method;
    },
  });
}

function copy(record: IdempotencyRecord): IdempotencyRecord {
  return {
    ...record,
    createdAt: new Date(record.createdAt),
    leaseUntil: new Date(record.leaseUntil),
    expiresAt: new Date(record.expiresAt),
    completedAt: record.completedAt && new Date(record.completedAt),
    archivedAt: record.archivedAt && new Date(record.archivedAt),
    outcome: record.outcome && { ...record.outcome },
    steps: record.steps.map((step) => ({ ...step })),
  };
}
