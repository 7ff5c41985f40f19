import type { RecordState } from './store.js';

interface EventBase {
  /** The record's scope: principal + operation (S1). */
  scope: string;
  /** The idempotency key. Events never carry the payload or a stored body (K5). */
  key: string;
}

/** The earlier generation of a key reused after its retention (R2). */
export interface ExpiredGeneration {
  generation: number;
  state: RecordState;
  firstSeenAt: Date;
  completedAt: Date | null;
  expiresAt: Date;
  archivedAt: Date | null;
  /** The stored outcome's status (200, 500, …); null if none was stored. */
  status: number | null;
  outcomeKind: 'success' | 'error' | null;
}

/** Everything the engine reports, through the one `onEvent` hook. */
export type IdempotencyEvent =
  | (EventBase & { type: 'claimed'; generation: number })
  | (EventBase & {
      type: 'completed';
      generation: number;
      status: number;
      outcomeKind: 'success' | 'error';
      /**
       * Whether the stored outcome is a failure: an error, or a result that carries errors of its
       * own (a GraphQL result with `errors`, whose status is 200). Search for it to find failed outcomes.
       */
      withErrors: boolean;
    })
  | (EventBase & { type: 'replayed'; generation: number; status: number; withErrors: boolean })
  | (EventBase & { type: 'conflict'; retryAfter: number })
  | (EventBase & { type: 'mismatch' })
  | (EventBase & { type: 'released'; generation: number })
  | (EventBase & { type: 'staleTakeover'; generation: number; previousLeaseUntil: Date; takeovers: number })
  | (EventBase & { type: 'fenced'; generation: number })
  | (EventBase & { type: 'expiredKeyReused'; generation: number; previous: ExpiredGeneration })
  | (EventBase & { type: 'expiredKeyRejected'; previous: ExpiredGeneration })
  | (EventBase & {
      type: 'storeError';
      operation: 'claim' | 'complete' | 'release';
      error: unknown;
      willRetry: boolean;
    });

export type IdempotencyEventType = IdempotencyEvent['type'];

/** The hook's type: log, count or trace events without patching idem. Exceptions it throws are ignored. */
export type IdempotencyEventHandler = (event: IdempotencyEvent) => void;
