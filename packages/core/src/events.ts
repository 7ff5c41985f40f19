import type { RecordState } from './store.js';

interface EventBase {
  /** The record's scope: principal + operation (S1), as stored (`formatScope(operation, principal)`). */
  scope: string;
  /**
   * The operation of the scope: a tRPC procedure path, a GraphQL mutation field or operation, an
   * HTTP route. Few distinct values: fit for a metric's label.
   */
  operation: string;
  /**
   * The principal of the scope (tenant, account, user), as the `principal` resolver returned it,
   * not encoded. One value per caller: never a metric's label (it would explode cardinality), and
   * as personal as your principals are.
   */
  principal: string;
  /** The idempotency key. Events never carry the payload or a stored body (K5). */
  key: string;
  /**
   * Which request this event answers: one id per call to `engine.execute` / `executeAtomic` (one
   * request, or one GraphQL unit of a request), so that `claimed` and `completed` of one execution
   * pair up, and a `replayed`, `conflict`, `mismatch` or `storeError` names the request it
   * answered. The caller's `ExecuteRequest.requestId` when given (a request id it logs already),
   * otherwise a random UUID. It says nothing about the payload (K5). The hook runs synchronously
   * in the request's async context, so it can also read the caller's own (an OpenTelemetry span,
   * an `AsyncLocalStorage`).
   */
  requestId: string;
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

/** Which store call failed, in a `storeError` event. */
export type StoreOperation = 'claim' | 'complete' | 'release' | 'renew' | 'countWait' | 'saveStep';

/** What the engine reports about a keyed request: every event but `unkeyed`. */
export type KeyedIdempotencyEvent =
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
      /**
       * How long the handler ran, in milliseconds (fractional, from `performance.now()`): from the
       * call of the handler until the promise it returned settled (or it threw). It excludes the
       * claim before it and the storing of its outcome after it; in atomic mode it is the run on
       * the savepoint, without the transaction's commit. A `completed` emitted by a later retry of
       * the outcome write (E7) carries the same run's duration.
       */
      durationMs: number;
      /**
       * E8: the outcome is a failure of an `onFailure: 'resume'` endpoint, stored as `resumable`
       * (not replayed): a retry with the same key completes the work.
       */
      resumable: boolean;
    })
  | (EventBase & {
      /**
       * E8: this request resumed a resumable failure of its generation: `attempt` is the execution
       * it starts (the record's `attempts`), `previousStatus` the failed attempt's status.
       */
      type: 'resumed';
      generation: number;
      attempt: number;
      previousStatus: number | null;
    })
  | (EventBase & {
      type: 'replayed';
      /** The generation whose stored outcome was replayed: its `completed` event has the same. */
      generation: number;
      status: number;
      withErrors: boolean;
    })
  | (EventBase & {
      type: 'conflict';
      retryAfter: number;
      /** The generation still running (E3); null in atomic mode, where its claim is not yet visible. */
      generation: number | null;
    })
  | (EventBase & {
      type: 'mismatch';
      /** The generation whose fingerprint differs from this request's (F3). */
      generation: number;
    })
  | (EventBase & { type: 'released'; generation: number })
  | (EventBase & { type: 'staleTakeover'; generation: number; previousLeaseUntil: Date; takeovers: number })
  | (EventBase & { type: 'fenced'; generation: number })
  | (EventBase & {
      /**
       * E6: a running handler lost its claim: a renewal found it taken over (`fenced`), or the store
       * was unreachable for longer than the lease (`unreachable`). Its `claim.signal` aborts.
       */
      type: 'leaseLost';
      generation: number;
      reason: 'fenced' | 'unreachable';
    })
  | (EventBase & {
      /**
       * E3w: a duplicate waited for the outcome of the execution in progress: answered with its
       * `replayed` outcome, with a `conflict` (409) when the wait ended first, or `claimed` when
       * the claim became free (released, or its owner stopped renewing) and this request ran it.
       */
      type: 'waited';
      generation: number;
      waitedMs: number;
      answer: 'replayed' | 'conflict' | 'claimed';
    })
  | (EventBase & { type: 'expiredKeyReused'; generation: number; previous: ExpiredGeneration })
  | (EventBase & { type: 'expiredKeyRejected'; previous: ExpiredGeneration })
  | (EventBase & {
      type: 'storeError';
      /** The store call that failed. (It was `operation` before `operation` named the endpoint's: see the changelog.) */
      storeOperation: StoreOperation;
      /** The generation claimed by this request, when the failure came after the claim; null for a failed claim. */
      generation: number | null;
      error: unknown;
      willRetry: boolean;
    });

/** Everything the `onEvent` hook receives: the engine's events of keyed requests, and the adapters' `unkeyed`. */
export type IdempotencyEvent = KeyedIdempotencyEvent | UnkeyedEvent;

/**
 * K2: a mutation that came without an idempotency key, reported by the adapters (`@idem/trpc`,
 * `@idem/envelop`, `@idem/fetch`) before any scope exists: `refused` when the operation requires
 * a key (400 `idempotency_key_missing`, nothing executed), otherwise it ran without idempotency.
 * It has no `scope`, `principal`, `key` or `requestId`: no key was sent, and the principal is not
 * resolved for a request idem does not handle: they read as `undefined` (narrow on `type` first).
 */
export interface UnkeyedEvent {
  type: 'unkeyed';
  operation: string;
  refused: boolean;
  /** Absent: no scope is formed for a request idem does not handle (read as `undefined` without narrowing). */
  scope?: undefined;
  principal?: undefined;
  key?: undefined;
  requestId?: undefined;
}

export type IdempotencyEventType = IdempotencyEvent['type'];

/** The hook's type: log, count or trace events without patching idem. Exceptions it throws are ignored. */
export type IdempotencyEventHandler = (event: IdempotencyEvent) => void;

/**
 * One hook out of several (`onEvent: combineEventHandlers(idempotencyTelemetry(), logEvent)`): each
 * gets every event, in order; one that throws does not keep the event from the others. Skips
 * `undefined`, so an optional hook can be passed as it is.
 */
export function combineEventHandlers(
  ...handlers: ReadonlyArray<IdempotencyEventHandler | undefined>
): IdempotencyEventHandler {
  const present = handlers.filter((handler): handler is IdempotencyEventHandler => typeof handler === 'function');
  return (event) => {
    for (const handler of present) {
      try {
        handler(event);
      } catch {
        // As the engine does: a hook must never change the outcome of a request, nor starve another hook.
      }
    }
  };
}
