/**
 * The dialect-neutral shape of a row, as drizzle maps it from either dialect (timestamps as
 * `Date`), and its projection onto the store contract's types.
 */
import {
  isExpired as isExpiredRecord,
  toTimelineEntry,
  type IdempotencyRecord,
  type RecordState,
  type TimelineEntry,
} from '@idem/core/store';

/** A row of the live table. */
export interface LiveRow {
  scope: string;
  key: string;
  generation: number;
  fingerprint: string | null;
  state: RecordState;
  token: string;
  createdAt: Date;
  leaseUntil: Date;
  expiresAt: Date;
  completedAt: Date | null;
  archivedAt: Date | null;
  takeovers: number;
  outcomeKind: 'success' | 'error' | null;
  outcomeStatus: number | null;
  body: string | null;
}

/** A row of the history table: an earlier generation, archived when its key was reused. */
export interface HistoryRow extends LiveRow {
  archivedAt: Date;
  reusedAt: Date;
}

export function toRecord(row: LiveRow): IdempotencyRecord {
  return {
    scope: row.scope,
    key: row.key,
    generation: row.generation,
    fingerprint: row.fingerprint,
    state: row.state,
    token: row.token,
    createdAt: row.createdAt,
    leaseUntil: row.leaseUntil,
    expiresAt: row.expiresAt,
    completedAt: row.completedAt,
    archivedAt: row.archivedAt,
    takeovers: row.takeovers,
    outcome:
      row.outcomeKind === null || row.outcomeStatus === null
        ? null
        : { kind: row.outcomeKind, status: row.outcomeStatus, body: row.body },
  };
}

/** Every generation, oldest first: the history rows, then the live row (A1). */
export function toTimeline(history: HistoryRow[], live: LiveRow | undefined): TimelineEntry[] {
  const entries = history.map((row) => toTimelineEntry(toRecord(row), row.reusedAt));
  if (live) entries.push(toTimelineEntry(toRecord(live), null));
  return entries;
}

/** Rule 2 of `claim`: retention passed (a claim inside its lease never expires, R1), or the sweeper archived the record. */
export function isExpired(row: LiveRow, now: Date): boolean {
  return isExpiredRecord(row, now.getTime());
}

/**
 * Whether the row locked for a reuse is still the generation the claimant saw expired; if
 * another claimant reused it first, the token changed and this one must re-read.
 */
export function isStillExpiredGeneration(locked: LiveRow, seen: LiveRow, now: Date): boolean {
  return locked.generation === seen.generation && locked.token === seen.token && isExpired(locked, now);
}
