/**
 * Rules every store applies the same way, whatever its backend: the memory store and
 * `@idem/drizzle` both read them from here (`@idem/core/store`).
 */
import type { ClaimRequest, IdempotencyRecord, StoredStep, TimelineEntry } from './store.js';

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

/** What {@link decideClaim} reads of a live record (an `IdempotencyRecord`, or a store's row of one). */
export type ClaimedRecordView = Pick<IdempotencyRecord, 'state' | 'token' | 'fingerprint' | 'leaseUntil' | 'expiresAt'>;

/**
 * The rule of `IdempotencyStore.claim` that applies, and the write it asks the store for:
 * - `insert` (rule 1): no live record: insert generation 1, `processing`;
 * - `reuse` (rule 2, `expiredReuse: 'execute'`): the record expired: move it to history and claim generation + 1;
 * - `reclaim` (rule 3): the claim was released: take it over as new, in the same generation;
 * - `resume` (E8, rule 3b): a `resumable` record, same payload: new token and lease, `processing`,
 *   `attempts + 1`, outcome null, steps and waits kept, same generation (`claimed` with `resumed`);
 * - `takeover` (rule 4): a `processing` claim whose lease passed, same payload: new token and lease,
 *   `takeovers + 1`, `attempts + 1`;
 * - `existing` (rule 5, or rule 2 with `expiredReuse: 'reject'`, then `expired`): answer the record as it is;
 * - `own` (rule 6, asked first): the record is a `processing` claim holding the request's own
 *   token: it is the request's claim already; answer it `claimed` as it is, no write.
 */
export type ClaimDecision<R extends ClaimedRecordView> =
  | { rule: 'insert' }
  | { rule: 'own'; record: R }
  | { rule: 'reuse' | 'reclaim' | 'resume' | 'takeover'; record: R }
  | { rule: 'existing'; record: R; expired: boolean };

/**
 * The claim rules, in one place (`IdempotencyStore.claim`, rules 1–6): which applies to the live
 * `record` of (scope, key) as read at the store's clock `now` (epoch milliseconds). Pure: the
 * store then performs the write, atomically, on the record it read.
 */
export function decideClaim<R extends ClaimedRecordView>(
  record: R | null | undefined,
  request: Pick<ClaimRequest, 'token' | 'fingerprint' | 'expiredReuse'>,
  now: number,
): ClaimDecision<R> {
  if (!record) return { rule: 'insert' };
  // Rule 6 before the others: a token is unique to one request, so a `processing` claim holding
  // it is this request's own (its first answer was lost, e.g. a group whose statement committed).
  if (record.state === 'processing' && record.token === request.token) return { rule: 'own', record };
  if (isExpired(record, now))
    return request.expiredReuse === 'execute' ? { rule: 'reuse', record } : { rule: 'existing', record, expired: true };
  if (record.state === 'released') return { rule: 'reclaim', record };
  // E8: a failed attempt of a `resume` endpoint: the same payload completes it; another is 422.
  if (record.state === 'resumable')
    return fingerprintsMatch(record.fingerprint, request.fingerprint)
      ? { rule: 'resume', record }
      : { rule: 'existing', record, expired: false };
  const stale = record.state === 'processing' && record.leaseUntil.getTime() <= now;
  if (stale && fingerprintsMatch(record.fingerprint, request.fingerprint)) return { rule: 'takeover', record };
  return { rule: 'existing', record, expired: false };
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
    waits: record.waits,
    onFailure: record.onFailure,
    attempts: record.attempts,
    steps: record.steps.map((step) => step.name),
  };
}

/** E8: the steps of a record once archived: names kept (audits), results dropped. */
export function archivedSteps(steps: readonly StoredStep[]): StoredStep[] {
  return steps.map(({ name }) => ({ name, result: null }));
}

/** E8: `steps` with `{ name, result }` saved: an entry of that name replaced in place, otherwise appended. */
export function withStep(steps: readonly StoredStep[], name: string, result: string): StoredStep[] {
  const index = steps.findIndex((step) => step.name === name);
  if (index === -1) return [...steps, { name, result }];
  return steps.map((step, i) => (i === index ? { name, result } : { ...step }));
}
