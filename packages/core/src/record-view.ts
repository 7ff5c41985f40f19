/** What the engine reads of a record: whether it replays (E2), and how an earlier generation is described in events (R2). */
import type { ExpiredGeneration } from './events.js';
import type { IdempotencyRecord, StoredOutcome } from './store.js';
import { toTimelineEntry } from './store-rules.js';

/** A completed record with a body to replay. */
export type Replayable = IdempotencyRecord & { outcome: StoredOutcome & { body: string } };

export function isReplayable(record: IdempotencyRecord): record is Replayable {
  return record.state === 'completed' && record.outcome !== null && record.outcome.body !== null;
}

export function describeGeneration(record: IdempotencyRecord): ExpiredGeneration {
  // The fields of its timeline entry (A1) that an event tells of an earlier generation.
  const { generation, state, firstSeenAt, completedAt, expiresAt, archivedAt, status, outcomeKind } = toTimelineEntry(
    record,
    null,
  );
  return { generation, state, firstSeenAt, completedAt, expiresAt, archivedAt, status, outcomeKind };
}
