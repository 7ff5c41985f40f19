/** What the engine reads of a record: whether it replays (E2), and how an earlier generation is described in events (R2). */
import type { ExpiredGeneration } from './events.js';
import type { IdempotencyRecord, StoredOutcome } from './store.js';

/** A completed record with a body to replay. */
export type Replayable = IdempotencyRecord & { outcome: StoredOutcome & { body: string } };

export function isReplayable(record: IdempotencyRecord): record is Replayable {
  return record.state === 'completed' && record.outcome !== null && record.outcome.body !== null;
}

export function describeGeneration(record: IdempotencyRecord): ExpiredGeneration {
  return {
    generation: record.generation,
    state: record.state,
    firstSeenAt: record.createdAt,
    completedAt: record.completedAt,
    expiresAt: record.expiresAt,
    archivedAt: record.archivedAt,
    status: record.outcome?.status ?? null,
    outcomeKind: record.outcome?.kind ?? null,
  };
}
