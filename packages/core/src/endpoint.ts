/** One execution's endpoint — its request with the engine's defaults filled in — and what is derived of it. */
import { randomUUID } from 'node:crypto';
import { deriveKey, type ClaimContext } from './claim.js';
import { waitMilliseconds } from './duplicate-wait.js';
import { toMilliseconds } from './duration.js';
import type { ExecuteRequest, ExecuteResult, IdempotencyEngine } from './engine-types.js';
import { retentionMsOf } from './failure-mode.js';
import type { OutcomeSerializer } from './outcome.js';
import { serializerCodec, type HandlerOutcome, type OutcomeCodec } from './outcome-codec.js';
import { warnIfRetentionBelowLease } from './retention-warning.js';
import { assertScopeFits, scopeParts } from './scope.js';
import type { ClaimOwner, ClaimResult, IdempotencyRecord, OnFailure } from './store.js';

/** An {@link ExecuteRequest} with the engine's defaults filled in. */
export interface Endpoint<TLive = unknown, TStored = unknown> {
  scope: string;
  key: string;
  /** What every event of this request carries besides its own fields. */
  subject: { scope: string; operation: string; principal: string; key: string; requestId: string };
  fingerprint: string | null;
  codec: OutcomeCodec<TLive, TStored>;
  leaseMs: number;
  retentionMs: number;
  expiredReuse: 'execute' | 'reject';
  waitMs: number;
  /** E8: the mode a new claim stores on its record (a resumed or taken-over record keeps its own). */
  onFailure: OnFailure;
}

/**
 * The request with the engine's defaults filled in (`policy`; `serializer` builds the codec of a
 * request that brings none).
 * @throws ScopeTooLongError (400) before anything is claimed, for a scope no store can key (S1).
 */
export function resolveEndpoint<TLive, TStored>(
  request: ExecuteRequest<TLive, TStored>,
  policy: IdempotencyEngine['policy'],
  serializer: OutcomeSerializer,
): Endpoint<TLive, TStored> {
  const { key, fingerprint, lease, retention, wait } = request;
  const onFailure = request.onFailure ?? policy.onFailure;
  const scope = assertScopeFits(request.scope);
  const { operation, principal } = scopeParts(request);
  const requestId = request.requestId ?? randomUUID();
  const leaseMs = lease === undefined ? policy.leaseMs : toMilliseconds(lease);
  // R1, E8: the endpoint's, else the engine's, else its mode's default (24 hours, 30 days for resume).
  const retentionMs = retentionMsOf(retention, policy, onFailure);
  if (lease !== undefined || retention !== undefined) warnIfRetentionBelowLease(retentionMs, leaseMs);
  return {
    scope,
    key,
    subject: { scope, operation, principal, key, requestId },
    fingerprint,
    codec: request.codec ?? legacyCodec(request, serializer),
    leaseMs,
    retentionMs,
    expiredReuse: request.expiredReuse ?? policy.expiredReuse,
    waitMs: wait === undefined ? policy.waitMs : waitMilliseconds(wait),
    onFailure,
  };
}

/**
 * The codec of a request that brings none: the deprecated per-request `serializer`, `errors`
 * and `statusOf`, then the engine's `serializer`. Its replayed values are what the serializer
 * parses: `TStored` is the caller's word for them (it defaults to `TLive`).
 */
function legacyCodec<TLive, TStored>(
  { serializer, errors, statusOf }: ExecuteRequest<TLive, TStored>,
  engineSerializer: OutcomeSerializer,
): OutcomeCodec<TLive, TStored> {
  const codec = serializerCodec({ serializer: serializer ?? engineSerializer, errors, statusOf });
  return {
    encode: (outcome) => codec.encode(outcome),
    decode: (stored) => codec.decode(stored) as HandlerOutcome<TStored>,
    carriesErrors: (value) => codec.carriesErrors?.(value) === true,
  };
}

export function claimRequest({ scope, key, fingerprint, leaseMs, retentionMs, expiredReuse, onFailure }: Endpoint) {
  return { scope, key, fingerprint, token: randomUUID(), leaseMs, retentionMs, expiredReuse, onFailure };
}

/** The claim a handler runs under; `step`: its recovery points (E8, `steps.ts`). */
export function claimContext<TTx>(
  { scope, key }: Endpoint,
  { generation, token, attempts }: IdempotencyRecord,
  signal: AbortSignal,
  step: ClaimContext['step'],
): ClaimContext<TTx> {
  return {
    scope,
    key,
    generation,
    attempt: attempts,
    token,
    signal,
    deriveKey: (label) => deriveKey({ scope, key, generation }, label),
    step,
  };
}

/** The downstream key of `label` under the claim of `record` (E8: a step's key is `deriveKey(name)`). */
export function keyDeriver({ scope, key }: Endpoint, { generation }: IdempotencyRecord): (label: string) => string {
  return (label) => deriveKey({ scope, key, generation }, label);
}

/**
 * E3w: whether a duplicate may wait on what it found: a claim in progress for the same payload.
 * Not an expired key (R2), another payload (F3), or a stored outcome (E2): those answer at once.
 */
export function isAwaitable(
  { fingerprint }: Endpoint,
  { record, expired }: Extract<ClaimResult, { outcome: 'existing' }>,
): boolean {
  if (expired || record.state !== 'processing') return false;
  return record.fingerprint === null || fingerprint === null || record.fingerprint === fingerprint;
}

export function ownerOf({ scope, key }: Endpoint, { token }: IdempotencyRecord): ClaimOwner {
  return { scope, key, token };
}

/** A live result: the handler's value or error, not replayed. */
export function liveResult<TLive, TStored, TAnswer>(
  result: HandlerOutcome<TLive>,
  generation: number,
  resumable = false,
): ExecuteResult<TLive, TStored, TAnswer> {
  const marked = resumable ? { resumable: true as const } : {};
  return result.ok
    ? { ok: true, value: result.value, replayed: false, generation, ...marked }
    : { ok: false, error: result.error, replayed: false, generation, ...marked };
}

/** E4: a run that did not start: its answer, nothing stored. */
export function notStartedResult<TLive, TStored, TAnswer>(
  answer: TAnswer,
  generation: number,
  resumable = false,
): ExecuteResult<TLive, TStored, TAnswer> {
  return { ok: false, replayed: false, notStarted: true, answer, generation, ...(resumable ? { resumable } : {}) };
}
