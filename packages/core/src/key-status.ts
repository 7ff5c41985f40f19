/**
 * The key-status lookup: what became of one of the caller's keys, so that a client past the
 * retention reconciles instead of retrying (R2, R4, A1), scoped to the caller's principal (S1).
 *
 * Built on the store contract's `timeline(scope, key)` and `get(scope, key)` only, so it works on
 * every store. The adapters expose it (`idempotencyStatusProcedure` in `@idem/trpc`, the
 * `idempotencyKeyStatus` field of `@idem/envelop`), and an HTTP route can call it directly.
 *
 * Three promises: a stored body is never returned past its retention; another principal's record
 * is never read (the scope is built from the caller's principal); and an unknown key and another
 * principal's key get the same answer, `null`, after the same reads.
 */
import type { KeyGenerationState, KeyGenerationStatus, KeyStatusDocument, StoredOutcomeValue } from './client-retry.js';
import { formatScope } from './engine.js';
import { readArgumentKey } from './key.js';
import { MissingKeyError } from './errors.js';
import { deserializeValue, type OutcomeSerializer, type StoredErrorDescription } from './outcome.js';
import { maskStoredOutcome } from './outcome-mask.js';
import type { IdempotencyRecord, IdempotencyStore, TimelineEntry } from './store.js';

export type {
  KeyGenerationState,
  KeyGenerationStatus,
  KeyStatusDocument,
  StoredOutcomeValue,
} from './client-retry.js';

/** The longest operation name a status query accepts. */
export const MAX_OPERATION_LENGTH = 512;

/**
 * A status query that is not one: its `operation` is missing, not a string, too long, or holds
 * characters outside printable ASCII (or spaces at its ends). Answered 400, like a malformed key (K3).
 */
export class KeyStatusQueryError extends Error {
  readonly code = 'idempotency_status_query_invalid' as const;
  readonly status = 400 as const;
  constructor(detail: string) {
    super(detail);
    this.name = 'KeyStatusQueryError';
  }
}

/**
 * A lookup by a shared principal (`sharedPrincipals`, by default `'*'`, `sharedPrincipal` of
 * `@idem/core`): every caller of that principal would read every other's stored outcomes by key
 * alone, so the lookup refuses it. Answered 403, with the problem type
 * `<documentation URL>#idempotency_lookup_shared_principal`.
 */
export class SharedPrincipalLookupError extends Error {
  readonly code = 'idempotency_lookup_shared_principal' as const;
  readonly status = 403 as const;
  readonly title = 'Key lookup needs your own credentials';
  constructor(
    detail = 'Keys of the shared anonymous account cannot be looked up: anyone could read them by key. Authenticate, and look up the keys you sent with your credentials.',
  ) {
    super(detail);
    this.name = 'SharedPrincipalLookupError';
  }

  /** The problem+json body (RFC 9457); `type` is the documentation URL with the code as fragment. */
  toProblem(documentationUrl: string): { type: string; title: string; status: 403; detail: string; code: string } {
    const fragment = documentationUrl.indexOf('#');
    const base = fragment === -1 ? documentationUrl : documentationUrl.slice(0, fragment);
    return {
      type: `${base}#${this.code}`,
      title: this.title,
      status: this.status,
      detail: this.message,
      code: this.code,
    };
  }
}

/** A status query: the key, and the operation it was used on (a tRPC path, `Mutation.<field>`). */
export interface KeyStatusQuery {
  key: string;
  operation: string;
}

/**
 * Reads a status query from what a caller sent (`{ key, operation }`): the key is validated as a
 * key in an input field is (K3, no quoting); the operation must be 1–512 visible ASCII characters,
 * with spaces inside allowed (a plain HTTP route's operation is its method and path, `POST /v1/payments`).
 * @throws MissingKeyError (400) without a key, InvalidKeyError (400) for a malformed one,
 *   KeyStatusQueryError (400) for a missing or malformed operation.
 */
export function parseKeyStatusQuery(input: unknown): KeyStatusQuery {
  const fields = (input !== null && typeof input === 'object' ? input : {}) as { key?: unknown; operation?: unknown };
  const key = readArgumentKey(fields.key, 'key');
  if (key === undefined) throw new MissingKeyError();
  const { operation } = fields;
  if (typeof operation !== 'string' || operation === '')
    throw new KeyStatusQueryError('Name the operation the key was used on: `operation`, e.g. payments.create.');
  if (operation.length > MAX_OPERATION_LENGTH || !/^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?$/.test(operation))
    throw new KeyStatusQueryError(
      `The operation must be at most ${MAX_OPERATION_LENGTH} visible ASCII characters (0x21-0x7E), with spaces only between them.`,
    );
  return { key, operation };
}

export interface KeyStatusOptions {
  /**
   * The serializer the engine stored success values with: the same as the adapter's
   * `serializer`. Defaults to `JSON`.
   */
  serializer?: OutcomeSerializer;
  /**
   * How far the application's clock may lag the store's. The store decides expiry by its own
   * clock (R1), which `get` does not report, so a stored body is returned only while its
   * retention has at least this much left by the application's clock: never past the
   * retention, as long as the two clocks are closer than this. Defaults to 1000 ms.
   */
  clockToleranceMs?: number;
  /** The application's clock, in epoch milliseconds. Defaults to `Date.now`. For tests. */
  now?: () => number;
  /**
   * Rewrites a replayable outcome before it is returned — as a replay would present it, e.g.
   * with unexpected errors masked. `stored` is what was stored: the value, or the whole error
   * description (with its `data`). Defaults to none.
   */
  presentOutcome?: (outcome: StoredOutcomeValue, stored: unknown) => StoredOutcomeValue;
}

/** Where a status query looks: the scopes (S1) of the operation's records, each with its operation name. */
export interface KeyStatusTarget {
  key: string;
  /** The operation asked about, echoed in the answer. */
  operation: string;
  /** The records to read: one per scope the operation's records live under. */
  scopes: ReadonlyArray<{ scope: string; operation: string }>;
}

/** Reads of a key whose records keep changing under the lookup are retried this often, then answered without a body. */
const CONSISTENT_READ_ATTEMPTS = 3;
const DEFAULT_CLOCK_TOLERANCE_MS = 1000;

/**
 * The status of `target.key` under `target.scopes`: every generation, oldest first (by first
 * sight), with the replayable outcome while it is inside its retention. `null` when no scope has
 * a record of the key.
 */
export async function lookUpKeyStatus(
  store: Pick<IdempotencyStore, 'timeline' | 'get'>,
  target: KeyStatusTarget,
  options: KeyStatusOptions = {},
): Promise<KeyStatusDocument | null> {
  const {
    serializer = JSON,
    clockToleranceMs = DEFAULT_CLOCK_TOLERANCE_MS,
    now = Date.now,
    presentOutcome = (outcome) => outcome,
  } = options;
  const read = await Promise.all(
    target.scopes.map(async ({ scope, operation }) =>
      (await consistentGenerations(store, scope, target.key)).map(({ entry, live }) =>
        describeGeneration(entry, live, operation, { serializer, now: now(), clockToleranceMs, presentOutcome }),
      ),
    ),
  );
  const generations = read.flat();
  if (generations.length === 0) return null;
  generations.sort((a, b) => Date.parse(a.firstSeenAt) - Date.parse(b.firstSeenAt) || a.generation - b.generation);
  return { key: target.key, operation: target.operation, generations };
}

/**
 * The timeline of (scope, key), its latest entry paired with the live record when that one may
 * hold a replayable body. A reuse landing between the two reads makes them disagree on the
 * generation: read again, and past a few attempts pair nothing (no body rather than a wrong one).
 */
async function consistentGenerations(
  store: Pick<IdempotencyStore, 'timeline' | 'get'>,
  scope: string,
  key: string,
): Promise<Array<{ entry: TimelineEntry; live: IdempotencyRecord | null }>> {
  let entries: TimelineEntry[] = [];
  for (let attempt = 0; attempt < CONSISTENT_READ_ATTEMPTS; attempt++) {
    entries = await store.timeline(scope, key);
    const latest = entries.at(-1);
    if (latest?.state !== 'completed') return entries.map((entry) => ({ entry, live: null }));
    const live = await store.get(scope, key);
    if (live && live.generation === latest.generation && live.state === 'completed')
      return entries.map((entry) => ({ entry, live: entry === latest ? live : null }));
  }
  return entries.map((entry) => ({ entry, live: null }));
}

function describeGeneration(
  entry: TimelineEntry,
  live: IdempotencyRecord | null,
  operation: string,
  {
    serializer,
    now,
    clockToleranceMs,
    presentOutcome,
  }: Required<Pick<KeyStatusOptions, 'serializer' | 'clockToleranceMs' | 'presentOutcome'>> & { now: number },
): KeyGenerationStatus {
  const state: KeyGenerationState =
    (entry.state === 'completed' || entry.state === 'resumable') && entry.expiresAt.getTime() <= now
      ? 'expired'
      : entry.state;
  const body = live?.outcome?.body;
  // Past the retention the store would run the key as new: its body is no longer the answer.
  const outcome =
    state === 'completed' &&
    live?.outcome &&
    typeof body === 'string' &&
    live.expiresAt.getTime() > now + clockToleranceMs
      ? storedOutcomeValue(live.outcome.kind, body, serializer, presentOutcome)
      : undefined;
  const generation: KeyGenerationStatus = {
    generation: entry.generation,
    operation,
    state,
    firstSeenAt: entry.firstSeenAt.toISOString(),
    completedAt: entry.completedAt?.toISOString() ?? null,
    expiresAt: entry.expiresAt.toISOString(),
    archivedAt: entry.archivedAt?.toISOString() ?? null,
    reusedAt: entry.reusedAt?.toISOString() ?? null,
    status: entry.status,
    outcomeKind: entry.outcomeKind,
    waits: entry.waits,
    onFailure: entry.onFailure,
    attempts: entry.attempts,
    steps: entry.steps,
    replayable: outcome !== undefined,
  };
  if (outcome) generation.outcome = outcome;
  return generation;
}

function storedOutcomeValue(
  kind: 'success' | 'error',
  body: string,
  serializer: OutcomeSerializer,
  presentOutcome: NonNullable<KeyStatusOptions['presentOutcome']>,
): StoredOutcomeValue | undefined {
  try {
    if (kind === 'success') {
      const value = deserializeValue(serializer, body);
      return maskStoredOutcome(presentOutcome({ kind, value }, value), value);
    }
    const description = JSON.parse(body) as StoredErrorDescription;
    const { name, code, message, status } = description;
    // The one masking rule holds whatever `presentOutcome` does: no unexpected error's text leaves.
    return maskStoredOutcome(
      presentOutcome({ kind, error: { name, code, message, status } }, description),
      description,
    );
  } catch {
    // A body this serializer cannot read is not replayable through this lookup: its status still is.
    return undefined;
  }
}

/** The options a key status lookup shares with the adapter it stands beside: pass it the same object. */
export interface KeyStatusLookupOptions<TContext> extends KeyStatusOptions {
  /** The adapter's store. Required. */
  store: Pick<IdempotencyStore, 'timeline' | 'get'>;
  /** The adapter's `principal` (S1): only the caller's own records are read. Required. */
  principal: (context: TContext) => string | Promise<string>;
  /**
   * Principals many callers share (an anonymous account): a lookup by one of them is refused
   * with {@link SharedPrincipalLookupError} (403), as any of those callers could read every
   * other's stored outcomes by key alone. Defaults to `['*']` (`sharedPrincipal`).
   */
  sharedPrincipals?: readonly string[];
}

/**
 * For adapters: a lookup bound to the adapter's store and principal. `scopesOf` maps the asked
 * operation to the operations its records live under (GraphQL keeps field keys and header keys
 * apart); defaults to the operation itself. The lookup rejects with {@link SharedPrincipalLookupError}
 * (403) for a principal listed in `sharedPrincipals`.
 * @throws TypeError `[idem] …` when `store` or `principal` is missing.
 */
export function createKeyStatusLookup<TContext>(
  options: KeyStatusLookupOptions<TContext>,
  scopesOf: (operation: string) => readonly string[] = (operation) => [operation],
): (context: TContext, query: KeyStatusQuery) => Promise<KeyStatusDocument | null> {
  const { store, principal, sharedPrincipals = ['*'], ...lookupOptions } = options;
  if (typeof principal !== 'function')
    throw new TypeError(
      "[idem] a key status lookup needs the adapter's `principal(context)` function (S1): pass the options you pass to the adapter",
    );
  if (typeof store?.timeline !== 'function' || typeof store.get !== 'function')
    throw new TypeError("[idem] a key status lookup needs the adapter's `store`");
  return async (context, { key, operation }) => {
    const id = await principal(context);
    if (sharedPrincipals.includes(id)) throw new SharedPrincipalLookupError();
    const scopes = scopesOf(operation).map((name) => ({ scope: formatScope(name, id), operation: name }));
    return lookUpKeyStatus(store, { key, operation, scopes }, lookupOptions);
  };
}
