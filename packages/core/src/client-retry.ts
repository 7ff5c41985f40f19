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
import { formatDuration, toMilliseconds, type Duration } from './duration.js';

// What a client needs of the key rules, so that this module alone serves browser clients.
export {
  formatIdempotencyKey,
  parseIdempotencyKey,
  validateKey,
  DEFAULT_KEY_FIELD,
  IDEMPOTENCY_KEY_HEADER,
  IDEMPOTENT_REPLAYED_HEADER,
  type KeyOptions,
} from './key.js';
export type { Duration } from './duration.js';

/**
 * Why an attempt may be repeated with the same key:
 * - `'network'`: no answer from the server (connection refused or reset, response lost): the outcome is unknown;
 * - `'in_progress'`: 409, the server is still processing the first request with this key (E3);
 * - `'unavailable'`: 503, the server could not reach its idempotency store and ran nothing (E5).
 */
export type RetryReason = 'network' | 'in_progress' | 'unavailable';

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

/** The transports a published policy lists (`EndpointPolicyDescription.transport`). */
export type PolicyTransport = 'trpc' | 'graphql' | 'http';

/**
 * Finds an endpoint's retention (ms) in a published policy: the tRPC procedure path
 * (`payments.create`) or GraphQL root field (`Mutation.createPayment`). An operation the
 * policy does not list gets the shortest retention the policy publishes; `undefined` when it
 * lists no endpoint at all.
 */
export type RetentionLookup = (transport: PolicyTransport, operation: string) => number | undefined;

type FetchLike = (input: string, init?: RequestInit) => Promise<Response>;

const policies = new WeakMap<FetchLike, Map<string, Promise<RetentionLookup>>>();

/**
 * Reads the published policy (R4) at `url` (`GET` with `Accept: application/json`) once per
 * URL and `fetch`, and returns its retention lookup. A failed load is not cached: the next call
 * tries again.
 * @throws Error `[idem] …` when the policy cannot be fetched or is not an idem policy document.
 */
export function loadRetentionPolicy(url: string | URL, options: { fetch?: FetchLike } = {}): Promise<RetentionLookup> {
  const fetchPolicy = options.fetch ?? (globalThis.fetch as FetchLike);
  const href = String(url);
  const cache = policies.get(fetchPolicy) ?? new Map<string, Promise<RetentionLookup>>();
  policies.set(fetchPolicy, cache);
  const cached = cache.get(href);
  if (cached) return cached;
  const loading = fetchRetentionLookup(href, fetchPolicy);
  cache.set(href, loading);
  loading.catch(() => cache.delete(href));
  return loading;
}

async function fetchRetentionLookup(url: string, fetchPolicy: FetchLike): Promise<RetentionLookup> {
  let document: unknown;
  try {
    const response = await fetchPolicy(url, { method: 'GET', headers: { accept: 'application/json' } });
    if (!response.ok) throw new Error(`it answered ${response.status}`);
    document = await response.json();
  } catch (error) {
    throw new Error(
      `[idem] could not read the idempotency policy at ${url}: ${error instanceof Error ? error.message : String(error)}`,
      { cause: error },
    );
  }
  const endpoints = (document as { endpoints?: unknown } | null)?.endpoints;
  const valid =
    Array.isArray(endpoints) &&
    endpoints.every(
      (e: any) =>
        e !== null &&
        typeof e === 'object' &&
        typeof e.transport === 'string' &&
        typeof e.operation === 'string' &&
        Number.isFinite(e.retentionMs) &&
        e.retentionMs > 0,
    );
  if (!valid)
    throw new Error(
      `[idem] ${url} is not an idem policy document: expected endpoints with transport, operation and retentionMs`,
    );
  const listed = endpoints as Array<{ transport: string; operation: string; retentionMs: number }>;
  const shortest = listed.length === 0 ? undefined : Math.min(...listed.map((e) => e.retentionMs));
  return (transport, operation) =>
    listed.find((e) => e.transport === transport && e.operation === operation)?.retentionMs ?? shortest;
}

/** Where a client takes the retention from: one of the two. */
export interface RetentionSourceOptions {
  /** The endpoints' retention, when you know it (e.g. `'24h'`). Pass this or `policyUrl`. */
  retention?: Duration;
  /** The server's published policy (`/idempotency`), read once and looked up per operation. Pass this or `retention`. */
  policyUrl?: string | URL;
}

/**
 * For client adapters: turns {@link RetentionSourceOptions} into a function resolving an
 * operation's retention in milliseconds.
 * @throws TypeError `[idem] …` at once when neither or both of `retention` and `policyUrl` are given.
 */
export function createRetentionResolver(
  options: RetentionSourceOptions & { fetch?: FetchLike | undefined },
  client: string,
): (transport: PolicyTransport, operations: readonly string[]) => Promise<number> {
  const { retention, policyUrl } = options;
  if ((retention === undefined) === (policyUrl === undefined)) {
    throw new TypeError(
      `[idem] ${client} needs to know how long the server keeps keys, to stop retrying before it forgets one: pass \`retention\` (e.g. '24h') or \`policyUrl\` (the published policy, e.g. 'https://api.example.com/idempotency'), exactly one of them`,
    );
  }
  if (retention !== undefined) {
    const retentionMs = toMilliseconds(retention);
    return async () => retentionMs;
  }
  return async (transport, operations) => {
    const lookup = await loadRetentionPolicy(policyUrl!, options.fetch ? { fetch: options.fetch } : {});
    const found = operations.map((operation) => lookup(transport, operation));
    if (found.length === 0) found.push(lookup(transport, ''));
    if (found.some((retentionMs) => retentionMs === undefined))
      throw new Error(
        `[idem] the idempotency policy at ${String(policyUrl)} lists no endpoint, so no retention is known`,
      );
    return Math.min(...(found as number[]));
  };
}

/**
 * What a key's status lookup says of one generation of a key (the server's `KeyStatus`), as it
 * travels: timestamps as ISO 8601 strings.
 *
 * - `processing`: claimed, the handler may be running (or its owner died: see the lease, E6);
 * - `completed`: an outcome is stored; replayed while `replayable`;
 * - `expired`: completed, but its retention has passed: the key would now run as new (R2);
 * - `released`: the claim was given back before the handler started: nothing ran (E4);
 * - `archived`: retention passed and the record was archived (R3); `status` says how it ended.
 */
export type KeyGenerationState = 'processing' | 'completed' | 'expired' | 'released' | 'archived';

/** One generation of a key, as the status lookup answers it (A1, for the caller's own keys). */
export interface KeyGenerationStatus {
  /** 1 for the first use of the key; +1 for each reuse after its retention (R2). */
  generation: number;
  /** The operation the record belongs to (a tRPC path, `Mutation.<field>`, `mutation:<fields>`). */
  operation: string;
  state: KeyGenerationState;
  /** When the server first saw this generation. */
  firstSeenAt: string;
  /** When its outcome was stored; `null` while none is. */
  completedAt: string | null;
  /** The end of its retention (R1): completion plus the endpoint's retention. */
  expiresAt: string;
  archivedAt: string | null;
  /** When a later generation replaced this one (the key was used again after its retention). */
  reusedAt: string | null;
  /** The outcome's HTTP-equivalent status (200, 500, …); `null` when none was stored. */
  status: number | null;
  outcomeKind: 'success' | 'error' | null;
  /** How many duplicates waited for this generation's outcome instead of answering 409 (E3w). */
  waits: number;
  /** Whether a retry with this key now would replay the stored outcome (E2). */
  replayable: boolean;
  /** The stored outcome itself, only while `replayable`; never past the retention. */
  outcome?: StoredOutcomeValue;
}

/** A stored outcome as the status lookup returns it: the value, or the error as described. */
export type StoredOutcomeValue =
  | { kind: 'success'; value: unknown }
  | { kind: 'error'; error: { name: string; code: string; message: string; status: number } };

/**
 * The answer of a key's status lookup: every generation of (operation, key) under the caller's
 * principal, oldest first. A lookup that finds nothing (an unknown key, or another principal's:
 * the same answer) answers `null` (404 over plain HTTP).
 */
export interface KeyStatusDocument {
  key: string;
  /** The operation asked about. */
  operation: string;
  generations: KeyGenerationStatus[];
}

/**
 * What a client learns when it reconciles a key instead of retrying it (the app decides what
 * to do with it; the client never sends the key again by itself):
 *
 * - `executed`: the operation ran; `at` and `status` say when and how it ended, and `value`
 *   (or `error`) is the stored outcome while it is still replayable. With several generations
 *   (the key was reused after its retention, R2) this is the first one that ran, and
 *   `executions` counts them all;
 * - `processing`: the key is claimed and no outcome is stored yet: it is still running, or its
 *   run ended without one (a crash; the next request with the key takes it over after the lease);
 * - `not_found`: the server has no execution of this key for this caller: it never saw it, it was
 *   given back before its handler started, or it belongs to someone else (the same answer, so
 *   keys cannot be probed).
 */
export type Reconciliation<T = unknown> =
  | {
      kind: 'executed';
      key: string;
      operation: string;
      /** The generation that ran first. */
      generation: number;
      /** When its outcome was stored. */
      at: Date;
      /** Its outcome's HTTP-equivalent status. */
      status: number;
      outcomeKind: 'success' | 'error';
      /** Whether the stored outcome is still replayed (and so given here). */
      replayable: boolean;
      /** The stored value, while replayable and a success. */
      value?: T;
      /** The stored error, while replayable and an error. */
      error?: { name: string; code: string; message: string; status: number };
      /** How many generations of the key ran: more than 1 means it was executed again after its retention. */
      executions: number;
      generations: KeyGenerationStatus[];
    }
  | { kind: 'processing'; key: string; operation: string; since: Date; generations: KeyGenerationStatus[] }
  | { kind: 'not_found'; key: string; operation: string };

/**
 * The {@link Reconciliation} a status lookup's answer amounts to (`null`: nothing found).
 * @throws TypeError `[idem] …` when `document` is not a key status document.
 */
export function toReconciliation<T = unknown>(
  key: string,
  operation: string,
  document: KeyStatusDocument | null | undefined,
): Reconciliation<T> {
  if (document === null || document === undefined) return { kind: 'not_found', key, operation };
  const generations = readGenerations(document);
  const ran = generations.filter((generation) => generation.status !== null && generation.outcomeKind !== null);
  const first = ran[0];
  if (first) {
    const executed: Extract<Reconciliation<T>, { kind: 'executed' }> = {
      kind: 'executed',
      key,
      operation,
      generation: first.generation,
      at: new Date(first.completedAt ?? first.firstSeenAt),
      status: first.status!,
      outcomeKind: first.outcomeKind!,
      replayable: first.replayable,
      executions: ran.length,
      generations,
    };
    if (first.replayable && first.outcome?.kind === 'success') executed.value = first.outcome.value as T;
    if (first.replayable && first.outcome?.kind === 'error') executed.error = first.outcome.error;
    return executed;
  }
  const claimed = generations.find(
    (generation) =>
      generation.state === 'processing' || (generation.state === 'archived' && generation.status === null),
  );
  if (claimed) return { kind: 'processing', key, operation, since: new Date(claimed.firstSeenAt), generations };
  return { kind: 'not_found', key, operation };
}

function readGenerations(document: KeyStatusDocument): KeyGenerationStatus[] {
  const generations = (document as { generations?: unknown } | null)?.generations;
  if (
    !Array.isArray(generations) ||
    !generations.every((generation: unknown) => {
      const fields = generation as Partial<Record<keyof KeyGenerationStatus, unknown>> | null;
      return (
        typeof fields === 'object' &&
        fields !== null &&
        typeof fields.generation === 'number' &&
        typeof fields.state === 'string' &&
        typeof fields.firstSeenAt === 'string'
      );
    })
  )
    throw new TypeError('[idem] the key status lookup did not answer a key status document (generations)');
  return generations as KeyGenerationStatus[];
}

/**
 * How many operations left unresolved a client remembers (oldest forgotten first): enough for
 * the retries of the operations it has in flight, bounded so that a long-lived process does not
 * accumulate them.
 */
const UNRESOLVED_OPERATIONS_KEPT = 100;

/**
 * For client adapters: the keys of operations whose outcome is unknown (every attempt failed
 * without an answer), by an identity the adapter chooses (the caller's key, or the operation and
 * its input). A retry layer above the client (tRPC's `retryLink`, Apollo's `RetryLink`, urql's
 * `retryExchange`, a loop of the caller's) sends the same operation again as a new one: found
 * here, it carries the same key and keeps its first attempt's deadline.
 */
export class UnresolvedOperations {
  readonly #entries = new Map<string, { key: string; firstAttemptAt: number }>();

  /** Removes and returns the entry: while its operation is in flight again, nobody else takes it. */
  take(identity: string): { key: string; firstAttemptAt: number } | undefined {
    const entry = this.#entries.get(identity);
    this.#entries.delete(identity);
    return entry;
  }

  keep(identity: string, entry: { key: string; firstAttemptAt: number }): void {
    this.#entries.delete(identity);
    this.#entries.set(identity, entry);
    if (this.#entries.size > UNRESOLVED_OPERATIONS_KEPT) this.#entries.delete(this.#entries.keys().next().value!);
  }
}
