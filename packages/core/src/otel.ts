/**
 * `@idem/core/otel` — OpenTelemetry metrics and span attributes from idem's events. Needs
 * `@opentelemetry/api` (an optional peer of `@idem/core`), loaded when `idempotencyTelemetry()` is
 * called, so this entry itself loads without it:
 *
 * ```ts
 * import { combineEventHandlers } from '@idem/core';
 * import { idempotencyTelemetry } from '@idem/core/otel';
 *
 * const onEvent = combineEventHandlers(idempotencyTelemetry(), logEvent);
 * ```
 */
import { createRequire } from 'node:module';
import type { Attributes, Counter, Histogram, Meter } from '@opentelemetry/api';
import type { IdempotencyEvent, IdempotencyEventHandler, IdempotencyEventType } from './events.js';

/** The instrumentation scope of the default meter. */
export const IDEMPOTENCY_METER_NAME = '@idem/core';
/** The counter: one per event, by `idempotency.event` and `idempotency.operation`. */
export const IDEMPOTENCY_EVENTS_METRIC = 'idempotency.events';
/** The histogram of handler run times (`completed`'s `durationMs`), in seconds. */
export const IDEMPOTENCY_DURATION_METRIC = 'idempotency.handler.duration';
/**
 * Bucket boundaries of the duration histogram, in seconds: OpenTelemetry's for HTTP server
 * durations, stretched to a minute for handlers that call slow payment channels.
 */
export const IDEMPOTENCY_DURATION_BUCKETS: readonly number[] = [
  0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 30, 60,
];

/**
 * What `idempotency.outcome` says on the active span: how idem answered the request. Set by the
 * event that decides it; a later one of the same request overrides an earlier one (a `fenced`
 * execution that then replays says `replayed`).
 */
export type IdempotencyOutcome =
  | 'executed'
  /** E8: executed, failed, and left resumable (`onFailure: 'resume'`): a retry with the key completes it. */
  | 'resumable'
  | 'replayed'
  | 'conflict'
  | 'mismatch'
  | 'expired_rejected'
  | 'not_started'
  | 'fenced'
  | 'store_error'
  /** K2: no key was sent and the operation requires one (400, nothing executed). */
  | 'key_missing'
  /** K2: no key was sent and the operation ran without idempotency (`required` lets it). */
  | 'unkeyed';

const OUTCOMES: Partial<Record<IdempotencyEventType, IdempotencyOutcome>> = {
  completed: 'executed',
  replayed: 'replayed',
  conflict: 'conflict',
  mismatch: 'mismatch',
  expiredKeyRejected: 'expired_rejected',
  released: 'not_started',
  fenced: 'fenced',
  storeError: 'store_error',
};

export interface IdempotencyTelemetryOptions {
  /**
   * Where the counter and the histogram are created. Defaults to the global meter provider's
   * meter `@idem/core` (`metrics.getMeter('@idem/core')`): register your SDK's provider before
   * the first event, or pass its meter.
   */
  meter?: Meter;
  /**
   * Whether events set `idempotency.*` attributes on the active span (the span of the request
   * that the host's instrumentation, or your code, started). Defaults to `true`.
   */
  spans?: boolean;
  /**
   * How many distinct `idempotency.operation` values the metrics carry: past
   * this many, a new operation is labelled {@link OTHER_OPERATION}, so that a path full of ids,
   * or mutations sent without a key in ever new combinations, cannot grow a series per request.
   * A request without a key that ran without idempotency (`unkeyed`, not refused) never takes
   * one of these places: its operation is labelled as it is only when another request already
   * made it known. Defaults to 100.
   */
  maxOperations?: number;
}

/** The `idempotency.operation` value of operations past `maxOperations`, and of unkeyed requests to unknown operations. */
export const OTHER_OPERATION = '(other)';

/** The slice of `@opentelemetry/api` this entry uses. */
interface OpenTelemetryApi {
  metrics: { getMeter(name: string): Meter };
  trace: { getActiveSpan(): { setAttributes(attributes: Attributes): unknown } | undefined };
}

const requireFromHere = createRequire(import.meta.url);

function loadApi(): OpenTelemetryApi {
  try {
    // The API keeps its providers and context manager on `globalThis`, so this copy and the one
    // the application imports share them, whichever module format each one loaded.
    return requireFromHere('@opentelemetry/api') as OpenTelemetryApi;
  } catch (error) {
    if ((error as { code?: unknown }).code !== 'MODULE_NOT_FOUND') throw error;
    throw new Error(
      '[idem] idempotencyTelemetry() needs @opentelemetry/api, an optional peer of @idem/core: npm install @opentelemetry/api',
      { cause: error },
    );
  }
}

/**
 * An `onEvent` hook that turns idem's events into OpenTelemetry metrics and span attributes:
 *
 * - counter `idempotency.events` (`{event}`): one per event, attributes `idempotency.event` (the
 *   event's `type`: `claimed`, `completed`, `replayed`, `conflict`, `mismatch`, `expiredKeyReused`,
 *   `staleTakeover`, `resumed`, `storeError`, `unkeyed`, …) and `idempotency.operation`; a `storeError` adds
 *   `idempotency.store_operation` (`claim`, `complete`, `release`), an `unkeyed` adds
 *   `idempotency.refused` (whether the mutation was refused for want of a key, K2), a `completed`
 *   adds `idempotency.resumable` (E8: its failure left the key resumable); a `resumed` event
 *   counts each retry that resumed a resumable key;
 * - histogram `idempotency.handler.duration` (`s`): each `completed`'s handler run time
 *   (`durationMs`), attributes `idempotency.operation` and `idempotency.outcome_kind`
 *   (`success`, `error`);
 * - on the active span: `idempotency.key_present` (`false` on an `unkeyed` event: a mutation
 *   sent without a key, refused or run without idempotency; `true` on every other),
 *   `idempotency.operation`, `idempotency.replayed` and `idempotency.outcome` (see
 *   {@link IdempotencyOutcome}).
 *
 * On the metrics, `idempotency.operation` is bounded: at most `maxOperations` values (default
 * 100), then `(other)`; requests run without a key add none. With `@idem/fetch`, label by route template: the
 * Hono middleware's operation is the matched route (`POST /orders/:id`); give `idempotent()` an
 * `operation` that names the route rather than the raw path.
 *
 * No attribute carries the principal or the key: one value per caller or per request would
 * explode a metric's cardinality, and neither belongs next to a trace's payload (K5). Compose it
 * with your own hook through `combineEventHandlers`.
 * @throws Error `[idem] …` when `@opentelemetry/api` is not installed.
 */
export function idempotencyTelemetry(options: IdempotencyTelemetryOptions = {}): IdempotencyEventHandler {
  const api = loadApi();
  const { meter = api.metrics.getMeter(IDEMPOTENCY_METER_NAME), spans = true, maxOperations = 100 } = options;
  const operations = new Set<string>();
  // The label an event may carry: bounded by `maxOperations`, never grown by an unkeyed request.
  const labelOf = (event: IdempotencyEvent): string => {
    if (operations.has(event.operation)) return event.operation;
    if ((event.type === 'unkeyed' && !event.refused) || operations.size >= maxOperations) return OTHER_OPERATION;
    operations.add(event.operation);
    return event.operation;
  };
  const events: Counter = meter.createCounter(IDEMPOTENCY_EVENTS_METRIC, {
    description: 'Idempotency events (claimed, completed, replayed, conflict, mismatch, …), by operation.',
    unit: '{event}',
  });
  const duration: Histogram = meter.createHistogram(IDEMPOTENCY_DURATION_METRIC, {
    description: 'How long idempotent handlers ran, from their call until their result settled.',
    unit: 's',
    advice: { explicitBucketBoundaries: [...IDEMPOTENCY_DURATION_BUCKETS] },
  });

  return (event) => {
    // Metrics by the bounded label; a span is one request's, and says which operation it was.
    const operation = labelOf(event);
    countEvent(events, event, operation);
    if (event.type === 'completed')
      duration.record(event.durationMs / 1000, {
        'idempotency.operation': operation,
        'idempotency.outcome_kind': event.outcomeKind,
      });
    if (spans) api.trace.getActiveSpan()?.setAttributes(spanAttributes(event));
  };
}

function countEvent(counter: Counter, event: IdempotencyEvent, operation: string): void {
  const attributes: Attributes = { 'idempotency.event': event.type, 'idempotency.operation': operation };
  if (event.type === 'storeError') attributes['idempotency.store_operation'] = event.storeOperation;
  if (event.type === 'unkeyed') attributes['idempotency.refused'] = event.refused;
  if (event.type === 'completed') attributes['idempotency.resumable'] = event.resumable === true;
  counter.add(1, attributes);
}

function spanAttributes(event: IdempotencyEvent): Attributes {
  if (event.type === 'unkeyed')
    return {
      'idempotency.key_present': false,
      'idempotency.operation': event.operation,
      'idempotency.replayed': false,
      'idempotency.outcome': event.refused ? 'key_missing' : 'unkeyed',
    };
  const attributes: Attributes = { 'idempotency.key_present': true, 'idempotency.operation': event.operation };
  if (event.type === 'claimed' || event.type === 'completed') attributes['idempotency.replayed'] = false;
  if (event.type === 'replayed') attributes['idempotency.replayed'] = true;
  const outcome = event.type === 'completed' && event.resumable ? 'resumable' : OUTCOMES[event.type];
  if (outcome !== undefined) attributes['idempotency.outcome'] = outcome;
  return attributes;
}
