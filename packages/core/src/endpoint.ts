/** One execution's endpoint — its request with the engine's defaults filled in — and what is derived of it. */
import { randomUUID } from 'node:crypto';
import { deriveKey, type ClaimContext } from './claim.js';
import type { ExecuteResult } from './engine-types.js';
import type { HandlerOutcome, OutcomeCodec } from './outcome-codec.js';
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
