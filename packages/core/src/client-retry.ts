/**
 * Client side of idempotency keys: retry an operation with the same key, but only while the
 * server still remembers the key (SPEC R1, R2, R4). Past the server's retention a retry is a
 * brand-new request (the seed's double charge), so the loop stops short of it and tells the
 * caller to reconcile.
 *
 * Transport-agnostic and free of Node.js APIs (Web Crypto, `setTimeout`, `fetch`), so
 * browser clients can use it; `@idem/trpc`'s `idempotencyLink` and `@idem/envelop/client`
 * are built on it.
 */
import type { Reconciliation } from './client-reconciliation.js';
import { formatDuration } from './duration.js';

// What a client needs of the key rules, so that this module alone serves browser clients.
export {
  formatIdempotencyKey,
  parseIdempotencyKey,
  validateKey,
  DEFAULT_KEY_FIELD,
  IDEMPOTENCY_KEY_HEADER,
  IDEMPOTENT_REPLAYED_HEADER,
  IDEMPOTENT_RESUMABLE_HEADER,
  type KeyOptions,
} from './key.js';
export type { Duration } from './duration.js';

/**
 * Why an attempt may be repeated with the same key:
 * - `'network'`: no answer from the server (connection refused or reset, response lost): the outcome is unknown;
 * - `'in_progress'`: 409, the server is still processing the first request with this key (E3);
 * - `'unavailable'`: 503, the server could not reach its idempotency store and ran nothing (E5);
 * - `'resumable'`: the endpoint resumes failures (`onFailure: 'resume'`, E8) and this one left the
 *   key resumable (`Idempotent-Resumable: true`): a retry with the same key completes the work,
 *   skipping the steps already done. A failure without that mark is final and never retried.
 */
export type RetryReason = 'network' | 'in_progress' | 'unavailable' | 'resumable';

/**
 * What one attempt reports: its value, or a failure that may be retried with the same key.
 * A failure that must not be retried (400, 422, a stored outcome) is thrown by the attempt.
 */
export type AttemptResult<T> =
  | { done: T }
  | {
      retry: {
        reason: RetryReason;
        /** The server's `Retry-After`, in milliseconds: the next attempt waits at least this long. */
        retryAfterMs?: number | undefined;
      };
      /** The failure, kept as `lastError` of the error thrown when retries stop. */
      error: unknown;
    };

/** What {@link ClientRetryOptions.onRetry} is told before each wait. */
export interface RetryNotice {
  /** The number of the attempt about to be made (2 for the first retry). */
  attempt: number;
  /** How long the client waits before it. */
  delayMs: number;
  reason: RetryReason;
  /** The failure of the previous attempt. */
  error: unknown;
}

/** Retry behaviour shared by every idem client (`retryWithinRetention`, `idempotencyLink`, `createIdempotentFetch`). */
export interface ClientRetryOptions {
  /**
   * How long before the end of the retention the client stops retrying, for clock skew and
   * transit time: a retry must reach the server while it still has the key. Defaults to 10% of
   * the retention, at least 1 second and at most 60 seconds (and never more than half the
   * retention).
   */
  safetyMarginMs?: number;
  /** Attempts in all, the first one included. `Infinity` leaves only the retention as a bound. Defaults to 10. */
  maxAttempts?: number;
  /** The back-off ceiling of the first retry; it doubles with each retry. Defaults to 250 ms. */
  initialDelayMs?: number;
  /** The largest back-off ceiling. Defaults to 30 seconds. */
  maxDelayMs?: number;
  /** Called before each wait, e.g. to log it. Defaults to none. */
  onRetry?: (notice: RetryNotice) => void;
  /** The clock, in milliseconds since the epoch. Defaults to `Date.now`. For tests. */
  now?: () => number;
  /** Waits `ms`, rejecting with `signal.reason` when it aborts. Defaults to a `setTimeout`. For tests. */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  /** A number in [0, 1) for the jitter. Defaults to `Math.random`. For tests. */
  random?: () => number;
}

export interface RetryWithinRetentionOptions extends ClientRetryOptions {
  /** The idempotency key every attempt carries; reported in the errors. Required. */
  key: string;
  /** The endpoint's retention, in milliseconds: from its published policy or configured. Required. */
  retentionMs: number;
  /**
   * When the key was first sent, in milliseconds since the epoch: pass it when resuming a key
   * from an earlier call, so the deadline is counted from its first use. Defaults to now.
   */
  firstAttemptAt?: number;
  /** Stops waiting and retrying; the call rejects with `signal.reason`. Defaults to none. */
  signal?: AbortSignal | null | undefined;
  /**
   * Looks the key up on the server when the retention window stops the retries (instead of only
   * throwing): the `RetentionWindowExceededError` then carries its answer as `reconciliation`
   * (or the lookup's failure as `reconciliationError`). Nothing is sent again. Defaults to none.
   */
  lookUp?: () => Promise<Reconciliation>;
}

export const DEFAULT_MAX_ATTEMPTS = 10;
export const DEFAULT_INITIAL_DELAY_MS = 250;
export const DEFAULT_MAX_DELAY_MS = 30_000;

/** Why retries stopped; both leave the operation's outcome unknown to the client. */
export type ClientRetryErrorCode = 'idempotency_retention_exceeded' | 'idempotency_retries_exhausted';

/** An operation that was retried with its key and is still unresolved. */
export abstract class UnresolvedOperationError extends Error {
  abstract readonly code: ClientRetryErrorCode;
  /** The key every attempt carried. */
  readonly key: string;
  /** When the key was first sent (ms since the epoch). */
  readonly firstAttemptAt: number;
  /** The server's retention of the key, in milliseconds. */
  readonly retentionMs: number;
  /** The last moment (ms since the epoch) a retry with this key may start: retention minus the safety margin. */
  readonly deadline: number;
  /** Attempts made in this call. */
  readonly attempts: number;
  /** The failure of the last attempt (also `cause`); `undefined` when none was made. */
  readonly lastError: unknown;

  constructor(
    message: string,
    details: {
      key: string;
      firstAttemptAt: number;
      retentionMs: number;
      deadline: number;
      attempts: number;
      lastError: unknown;
    },
  ) {
    super(message, details.lastError === undefined ? undefined : { cause: details.lastError });
    this.name = new.target.name;
    this.key = details.key;
    this.firstAttemptAt = details.firstAttemptAt;
    this.retentionMs = details.retentionMs;
    this.deadline = details.deadline;
    this.attempts = details.attempts;
    this.lastError = details.lastError;
  }
}

/**
 * The next attempt would start too close to the end of the server's retention: the server may
 * have forgotten the key by then and would execute the retry as a new request (R2). Reconcile
 * instead: look the operation up before sending it again with a new key.
 */
export class RetentionWindowExceededError extends UnresolvedOperationError {
  readonly code = 'idempotency_retention_exceeded' as const;
  /**
   * What the server says became of the key, when the client was asked to look it up (the
   * clients' `reconcile` option): executed (when, with which status, the value while it is
   * replayable), not found, or still processing. `undefined` otherwise, or when the lookup failed.
   */
  reconciliation: Reconciliation | undefined;
  /** Why the lookup failed, when it was asked for and failed; `undefined` otherwise. */
  reconciliationError: unknown;
  constructor(details: ConstructorParameters<typeof UnresolvedOperationError>[1]) {
    super(
      `[idem] Stopped retrying Idempotency-Key "${details.key}": the next attempt would start after ${new Date(details.deadline).toISOString()}, ` +
        `too close to the end of the server's ${formatDuration(details.retentionMs)} retention of the key (first sent at ${new Date(details.firstAttemptAt).toISOString()}, ${plural(details.attempts, 'attempt')}). ` +
        'The server may have forgotten the key by then, and a retry could be executed as a new request. ' +
        'Reconcile instead: look the operation up (by your own reference or this key) to learn whether it happened, before sending it again with a new key.',
      details,
    );
    this.reconciliation = undefined;
    this.reconciliationError = undefined;
  }
}

/**
 * `maxAttempts` attempts failed with retryable errors. The outcome is unknown; the key is still
 * valid until `deadline`: retry later with the same key (and `firstAttemptAt`) before it, or reconcile.
 */
export class RetriesExhaustedError extends UnresolvedOperationError {
  readonly code = 'idempotency_retries_exhausted' as const;
  constructor(details: ConstructorParameters<typeof UnresolvedOperationError>[1]) {
    super(
      `[idem] Gave up on Idempotency-Key "${details.key}" after ${plural(details.attempts, 'attempt')}; whether the operation happened is unknown. ` +
        `Retry later with the same key before ${new Date(details.deadline).toISOString()} (the server keeps it for ${formatDuration(details.retentionMs)} from ${new Date(details.firstAttemptAt).toISOString()}), or reconcile: look the operation up.`,
      details,
    );
  }
}

const plural = (count: number, noun: string) => `${count} ${noun}${count === 1 ? '' : 's'}`;

/**
 * The default safety margin for a retention: 10% of it, at least 1 s, at most 60 s, and never
 * more than half the retention.
 */
export function defaultSafetyMargin(retentionMs: number): number {
  return Math.min(Math.max(retentionMs * 0.1, 1000), 60_000, retentionMs / 2);
}

/**
 * The last moment a retry with a key first sent at `firstAttemptAt` may start:
 * `firstAttemptAt + retentionMs - safetyMarginMs`. The server counts retention from when it
 * first saw the key, which is never earlier than when the client first sent it.
 */
export function retryDeadline(
  firstAttemptAt: number,
  retentionMs: number,
  safetyMarginMs: number = defaultSafetyMargin(retentionMs),
): number {
  return firstAttemptAt + retentionMs - safetyMarginMs;
}

/**
 * Runs `attempt` until it is done, retrying failures it reports as retryable with full-jitter
 * exponential back-off (`random() * min(maxDelayMs, initialDelayMs * 2^(n-1))`, with the
 * server's `Retry-After` as a floor), but never starting an attempt at or after
 * {@link retryDeadline}.
 *
 * @throws RetentionWindowExceededError when the next attempt would start at or after the deadline.
 * @throws RetriesExhaustedError after `maxAttempts` retryable failures.
 * @throws whatever `attempt` throws (a failure that must not be retried), and `signal.reason` on abort.
 */
export async function retryWithinRetention<T>(
  attempt: (attemptNumber: number) => Promise<AttemptResult<T>>,
  options: RetryWithinRetentionOptions,
): Promise<T> {
  const {
    key,
    retentionMs,
    safetyMarginMs = defaultSafetyMargin(retentionMs),
    maxAttempts = DEFAULT_MAX_ATTEMPTS,
    initialDelayMs = DEFAULT_INITIAL_DELAY_MS,
    maxDelayMs = DEFAULT_MAX_DELAY_MS,
    onRetry,
    now = Date.now,
    sleep = defaultSleep,
    random = Math.random,
    signal,
    lookUp,
  } = options;
  if (!(retentionMs > 0) || !Number.isFinite(retentionMs))
    throw new RangeError(`[idem] retentionMs must be a positive number of milliseconds, got ${retentionMs}`);
  if (!(safetyMarginMs >= 0) || safetyMarginMs >= retentionMs) {
    throw new RangeError(
      `[idem] safetyMarginMs must be at least 0 and below the retention (${retentionMs} ms), got ${safetyMarginMs}`,
    );
  }
  if (!(maxAttempts >= 1)) throw new RangeError(`[idem] maxAttempts must be at least 1, got ${maxAttempts}`);

  const firstAttemptAt = options.firstAttemptAt ?? now();
  const deadline = retryDeadline(firstAttemptAt, retentionMs, safetyMarginMs);
  let attempts = 0;
  let lastError: unknown;
  const windowExceeded = async () => {
    const error = new RetentionWindowExceededError({ key, firstAttemptAt, retentionMs, deadline, attempts, lastError });
    if (!lookUp) return error;
    try {
      error.reconciliation = await lookUp();
    } catch (failure) {
      error.reconciliationError = failure;
    }
    return error;
  };

  for (;;) {
    signal?.throwIfAborted();
    // Checked again after every wait: a timer can fire late (a suspended laptop, a frozen tab).
    if (now() >= deadline) throw await windowExceeded();
    attempts += 1;
    const result = await attempt(attempts);
    if ('done' in result) return result.done;

    lastError = result.error;
    if (attempts >= maxAttempts)
      throw new RetriesExhaustedError({ key, firstAttemptAt, retentionMs, deadline, attempts, lastError });
    const ceiling = Math.min(maxDelayMs, initialDelayMs * 2 ** (attempts - 1));
    const retryAfterMs = result.retry.retryAfterMs;
    const delayMs = Math.max(random() * ceiling, retryAfterMs !== undefined && retryAfterMs > 0 ? retryAfterMs : 0);
    if (now() + delayMs >= deadline) throw await windowExceeded();
    onRetry?.({ attempt: attempts + 1, delayMs, reason: result.retry.reason, error: result.error });
    await sleep(delayMs, signal ?? undefined);
  }
}

function defaultSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * A `Retry-After` header value in milliseconds: delay-seconds or an HTTP-date (RFC 9110
 * §10.2.3). `undefined` when absent or unreadable.
 */
export function parseRetryAfter(value: string | null | undefined, now: () => number = Date.now): number | undefined {
  if (value === null || value === undefined) return undefined;
  const trimmed = value.trim();
  if (/^\d+$/.test(trimmed)) return Number(trimmed) * 1000;
  // Every HTTP-date form starts with a day name; Date.parse alone would read '-1' as a year.
  const date = /^[A-Za-z]{3}/.test(trimmed) ? Date.parse(trimmed) : NaN;
  return Number.isNaN(date) ? undefined : Math.max(0, date - now());
}

/** A new idempotency key: a UUID v4 (RFC 9562), as the draft recommends. */
export function newIdempotencyKey(): string {
  const crypto = globalThis.crypto;
  // randomUUID exists only in secure contexts (https, localhost); getRandomValues everywhere.
  if (typeof crypto.randomUUID === 'function') return crypto.randomUUID();
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  bytes[6] = (bytes[6]! & 0x0f) | 0x40;
  bytes[8] = (bytes[8]! & 0x3f) | 0x80;
  const hex = Array.from(bytes, (byte) => byte.toString(16).padStart(2, '0')).join('');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

export {
  createRetentionResolver,
  loadRetentionPolicy,
  type PolicyTransport,
  type RetentionLookup,
  type RetentionSourceOptions,
} from './client-policy.js';
export {
  toReconciliation,
  UnresolvedOperations,
  type KeyGenerationState,
  type KeyGenerationStatus,
  type KeyStatusDocument,
  type Reconciliation,
  type StoredOutcomeValue,
} from './client-reconciliation.js';
