/**
 * Rules every store applies the same way, whatever its backend: the memory store and
 * `@idem/drizzle` both read them from here (`@idem/core/store`).
 */
import type { IdempotencyRecord, TimelineEntry } from './store.js';

/**
 * R1: a record is expired once archived, or once its retention has passed — except a
 * `processing` claim still inside its lease, which never expires, whatever the retention:
 * retention bounds how long an outcome is replayed, never a running execution.
 */
export function isExpired(record: Pick<IdempotencyRecord, 'state' | 'expiresAt' | 'leaseUntil'>, now: number): boolean {
  if (record.state === 'archived') return true;
  if (record.expiresAt.getTime() > now) return false;
  return !(record.state === 'processing' && record.leaseUntil.getTime() > now);
}

/** E6/F2: two fingerprints match when equal or when either is absent (a stale claim may be taken over). */
export function fingerprintsMatch(stored: string | null, incoming: string | null): boolean {
  return stored === null || incoming === null || stored === incoming;
}

/** A1: a record (live or archived) as one entry of its key's timeline. */
export function toTimelineEntry(record: IdempotencyRecord, reusedAt: Date | null): TimelineEntry {
  return {
    generation: record.generation,
    state: record.state,
    fingerprint: record.fingerprint,
    firstSeenAt: record.createdAt,
    completedAt: record.completedAt,
    status: record.outcome?.status ?? null,
    outcomeKind: record.outcome?.kind ?? null,
    expiresAt: record.expiresAt,
    archivedAt: record.archivedAt,
    reusedAt,
    takeovers: record.takeovers,
  };
}
