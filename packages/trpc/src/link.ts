/**
 * The client half of @idem/trpc: a `@trpc/client` link that gives each mutation call one key,
 * keeps it across retries (its own and those of a retry layer above it), stops retrying before
 * the server's retention ends, and reconciles instead (R2, R4).
 *
 * Only types come from `@trpc/client`, so importing `@idem/trpc` on a server without the client
 * installed still works; the runtime import is `@trpc/server/observable`, a peer dependency.
 */
import { observable, type Unsubscribable } from '@trpc/server/observable';
import type { AnyRouter } from '@trpc/server';
import type { Operation, OperationLink, OperationResultEnvelope, TRPCClientError, TRPCLink } from '@trpc/client';
import {
  createRetentionResolver,
  DEFAULT_KEY_FIELD,
  formatIdempotencyKey,
  IDEMPOTENCY_KEY_HEADER,
  IDEMPOTENT_REPLAYED_HEADER,
  IDEMPOTENT_RESUMABLE_HEADER,
  newIdempotencyKey,
  parseRetryAfter,
  retryWithinRetention,
  toReconciliation,
  UnresolvedOperations,
  validateKey,
  type AttemptResult,
  type KeyOptions,
  type KeyStatusDocument,
  type Reconciliation,
  type ClientRetryOptions,
  type RetentionSourceOptions,
  type RetryReason,
} from '@idem/core/client';
import type { IdempotencyErrorCode } from '@idem/core';

/**
 * Options of {@link idempotencyLink}: where the key goes, where the retention comes from
 * (`retention` or `policyUrl`, exactly one), and the retry behaviour (`maxAttempts`,
 * `initialDelayMs`, `maxDelayMs`, `safetyMarginMs`, `onRetry`).
 */
export interface IdempotencyLinkOptions extends ClientRetryOptions, RetentionSourceOptions {
  /**
   * Where the key of a mutation call goes, in the server's words (`KeyOptions`). `header: true`
   * (the default): in `op.context.idempotencyKey`, for {@link idempotencyHeaders} to send as the
   * `Idempotency-Key` header from your `httpLink`'s `headers`. `header: false`: in the input
   * field `field` (default `'idempotencyKey'`) of the call's input (an object), one key per call,
   * so batch links work. Defaults to `{ header: true }`.
   */
  key?: KeyOptions;
  /** The `fetch` that reads `policyUrl`. Defaults to `globalThis.fetch`. */
  fetch?: (input: string, init?: RequestInit) => Promise<Response>;
  /**
   * When the retention stops the retries, look the key up instead of only throwing: the link
   * queries the server's `idempotencyStatusProcedure` (mounted at `path`, default
   * `'idempotency.status'`) through the links after it, with the mutation's own context, and the
   * `RetentionWindowExceededError` it throws carries the answer as `reconciliation` (executed,
   * not found or processing). The link never sends the mutation again by itself: the app
   * decides. `true` is `{ path: 'idempotency.status' }`. Defaults to `false`.
   */
  reconcile?: boolean | { path?: string };
}

/** Where {@link idempotencyStatusProcedure}'s examples mount it, and where `reconcile: true` looks. */
export const DEFAULT_STATUS_PATH = 'idempotency.status';

/**
 * What a caller may put in a mutation's `context` (`mutate(input, { context })`) to resume a
 * known key instead of getting a new one.
 */
export interface IdempotencyOperationContext {
  /** The key to send (header mode; in input mode, set the input field instead). Defaults to a new UUID v4. */
  idempotencyKey?: string;
  /**
   * When this key was first sent (ms since the epoch, e.g. the `firstAttemptAt` of an earlier
   * `RetriesExhaustedError`), so the retention is counted from its first use. Defaults to now.
   */
  idempotencyFirstAttemptAt?: number;
}

type Envelope = OperationResultEnvelope<unknown, TRPCClientError<AnyRouter>>;

/** Contexts whose key {@link idempotencyHeaders} turned into a header. */
const sentHeaders = new WeakSet<object>();

/**
 * The `Idempotency-Key` header of an operation that carries a key (set by
 * {@link idempotencyLink} or by the caller), formatted as an RFC 9651 sf-string (K1); `{}`
 * otherwise. Spread it into your `httpLink`'s headers:
 *
 * ```ts
 * httpLink({ url, headers: ({ op }) => ({ ...idempotencyHeaders(op), authorization: token() }) })
 * ```
 */
export function idempotencyHeaders(op: { context: Record<string, unknown> }): Record<string, string> {
  const key = op.context['idempotencyKey'];
  if (typeof key !== 'string' || key === '') return {};
  sentHeaders.add(op.context);
  return { [IDEMPOTENCY_KEY_HEADER]: formatIdempotencyKey(key) };
}

/**
 * A `@trpc/client` link that makes mutation calls safe to retry (queries and subscriptions pass
 * through untouched):
 *
 * - each call gets a key (a UUID v4, or the caller's `context.idempotencyKey`), kept across its
 *   retries and across a retry layer above the link: tRPC's `retryLink` sending the operation
 *   again, or the caller sending the same mutation again after it was left unresolved;
 * - network failures, 409 (still processing, E3), 503 (store unavailable, E5) and failures the
 *   server marked resumable (E8: a procedure with `onFailure: 'resume'`, `data.idempotentResumable`
 *   or `Idempotent-Resumable: true`) are retried with the same key and jittered exponential
 *   back-off, waiting at least the server's `Retry-After`;
 * - every other error (400, 422, a replayed stored outcome, an unmarked 500 included) is passed on as it is;
 * - no retry starts within the safety margin of the endpoint's retention (from `retention` or the
 *   published policy at `policyUrl`): the call fails with a `RetentionWindowExceededError`
 *   (`error.cause` of the `TRPCClientError`), telling the caller to reconcile instead — with
 *   `reconcile: true`, carrying the server's answer about the key (`reconciliation`).
 *
 * Put it before the terminating link:
 *
 * ```ts
 * createTRPCClient<AppRouter>({
 *   links: [idempotencyLink({ policyUrl: 'https://api.example.com/idempotency' }), httpLink({ url, headers: ({ op }) => idempotencyHeaders(op) })],
 * });
 * ```
 *
 * @throws TypeError `[idem] …` at once when neither or both of `retention` and `policyUrl` are given.
 */
export function idempotencyLink<TRouter extends AnyRouter = AnyRouter>(
  options: IdempotencyLinkOptions,
): TRPCLink<TRouter> {
  const {
    key: { header = true, field = DEFAULT_KEY_FIELD } = {},
    retention,
    policyUrl,
    fetch,
    reconcile = false,
    ...retryOptions
  } = options;
  if (!header && (typeof field !== 'string' || field === ''))
    throw new TypeError(
      '[idem] idempotencyLink: with `key.header: false` the key goes in `key.field`, which must be a field name',
    );
  const where: Where = header ? { header: true } : { header: false, field: field as string };
  const resolveRetention = createRetentionResolver({ retention, policyUrl, fetch }, 'idempotencyLink');
  const now = retryOptions.now ?? Date.now;
  const statusPath =
    reconcile === false ? undefined : ((reconcile === true ? undefined : reconcile.path) ?? DEFAULT_STATUS_PATH);
  // A retry layer above this link sends a mutation again: tRPC's retryLink passes the same
  // operation, so its key is kept with it; a caller's loop sends an identical new one, found
  // among the operations left unresolved.
  const keyedOperations = new WeakMap<Operation, KeyedOperation>();
  const unresolved = new UnresolvedOperations();

  return () =>
    ({ op, next }) => {
      if (op.type !== 'mutation') return next(op);
      return observable<Envelope, TRPCClientError<TRouter>>((observer) => {
        const controller = new AbortController();
        const abort = () => controller.abort(op.signal?.reason);
        if (op.signal?.aborted) abort();
        else op.signal?.addEventListener('abort', abort, { once: true });
        let current: Unsubscribable | undefined;
        let disposed = false;

        const attempt = (keyed: Operation) =>
          new Promise<AttemptResult<Envelope>>((resolve, reject) => {
            let answered = false;
            current = next(keyed).subscribe({
              next(envelope) {
                answered = true;
                resolve({ done: envelope });
              },
              error(error) {
                const retry = controller.signal.aborted ? undefined : classifyTRPCError(error, now);
                if (!retry) return reject(error);
                if (where.header && !sentHeaders.has(keyed.context)) return reject(headerNeverSent(keyed.path, error));
                resolve({ retry, error });
              },
              complete() {
                if (!answered) reject(new Error(`[idem] the mutation ${keyed.path} completed without a result`));
              },
            });
          });

        const run = async () => {
          let kept = keyedOperations.get(op);
          if (!kept) {
            const identity = identityOf(op, where);
            const earlier = identity === undefined ? undefined : unresolved.take(identity);
            const firstAttemptAt = op.context['idempotencyFirstAttemptAt'];
            kept = {
              ...withKey(op, where, earlier?.key),
              identity,
              firstAttemptAt: typeof firstAttemptAt === 'number' ? firstAttemptAt : earlier?.firstAttemptAt,
            };
            keyedOperations.set(op, kept);
          }
          const { keyed, key, identity } = kept;
          try {
            const retentionMs = await resolveRetention('trpc', [op.path]);
            kept.firstAttemptAt ??= now();
            return await retryWithinRetention(() => attempt(keyed), {
              ...retryOptions,
              key,
              retentionMs,
              firstAttemptAt: kept.firstAttemptAt,
              signal: controller.signal,
              ...(statusPath === undefined ? {} : { lookUp: () => lookUpThrough(next, op, statusPath, key) }),
            });
          } catch (error) {
            // The outcome is unknown (or nothing was sent): the next identical mutation keeps this key and deadline.
            if (identity !== undefined && !isAnswer(error))
              unresolved.keep(identity, { key, firstAttemptAt: kept.firstAttemptAt ?? now() });
            throw error;
          }
        };

        run().then(
          (envelope) => {
            if (disposed) return;
            observer.next(envelope);
            observer.complete();
          },
          // Errors the link raises itself (RetentionWindowExceededError, …) are not TRPCClientErrors:
          // the client wraps them (`TRPCClientError.from`), so callers find them as `error.cause`.
          (error: unknown) => {
            if (!disposed) observer.error(error as TRPCClientError<TRouter>);
          },
        );
        return () => {
          disposed = true;
          op.signal?.removeEventListener('abort', abort);
          controller.abort();
          current?.unsubscribe();
        };
      });
    };
}

/**
 * The key's status, queried from the procedure at `path` through the links after this one, with
 * the mutation's context (its auth) but not its key: a query carries none.
 */
function lookUpThrough(
  next: Parameters<OperationLink<AnyRouter>>[0]['next'],
  op: Operation,
  path: string,
  key: string,
): Promise<Reconciliation> {
  const { idempotencyKey: _key, idempotencyFirstAttemptAt: _first, ...context } = op.context;
  const query: Operation = { ...op, type: 'query', path, input: { key, operation: op.path }, context };
  return new Promise((resolve, reject) => {
    let answered = false;
    let subscription: Unsubscribable | undefined;
    subscription = next(query).subscribe({
      next(envelope) {
        answered = true;
        try {
          const data = (envelope.result as { data?: unknown }).data;
          resolve(toReconciliation(key, op.path, data as KeyStatusDocument | null));
        } catch (error) {
          reject(error);
        }
        subscription?.unsubscribe();
      },
      error: reject,
      complete() {
        if (!answered) reject(new Error(`[idem] the key status query ${path} completed without a result`));
      },
    });
    if (answered) subscription.unsubscribe();
  });
}

/** Where the link puts keys: the header, or an input field. */
type Where = { header: true } | { header: false; field: string };

/** A mutation the link has keyed: what every attempt sends, through every retry layer above the link. */
interface KeyedOperation {
  keyed: Operation;
  key: string;
  /** Set once the retention is known, right before the first attempt. */
  firstAttemptAt: number | undefined;
  /** How an identical mutation sent again is recognized; `undefined` when it cannot be. */
  identity: string | undefined;
}

/**
 * What makes a new operation the same mutation sent again: the caller's key when it gave one,
 * otherwise the procedure and its input. `undefined` for an input JSON cannot write.
 */
function identityOf(op: Operation, where: Where): string | undefined {
  const given = op.context['idempotencyKey'] ?? (where.header ? undefined : fieldOf(op.input, where.field));
  if (typeof given === 'string' && given !== '') return `key ${given}`;
  try {
    return `${op.path}\n${JSON.stringify(op.input) ?? ''}`;
  } catch {
    return undefined;
  }
}

function fieldOf(input: unknown, field: string): unknown {
  return isPlainObject(input) ? input[field] : undefined;
}

/** An error that is the server's answer (a tRPC error body), so the outcome is known. */
function isAnswer(error: unknown): boolean {
  if (!(error instanceof Error) || error.name !== 'TRPCClientError') return false;
  const { shape, data } = error as Error & ClientErrorLike;
  return Boolean(shape || data);
}

/** The operation every attempt sends (the same key each time), and its key. */
function withKey(op: Operation, where: Where, earlierKey?: string): { keyed: Operation; key: string } {
  const contextKey = readKey(op.context['idempotencyKey'], 'context.idempotencyKey');
  if (where.header) {
    const key = contextKey ?? earlierKey ?? newIdempotencyKey();
    return { keyed: { ...op, context: { ...op.context, idempotencyKey: key } }, key };
  }
  const { field } = where;
  const input = op.input;
  if (!isPlainObject(input)) {
    throw new TypeError(
      `[idem] idempotencyLink puts the key in the input field \`${field}\`, so the input of ${op.path} must be an object; got ${input === null ? 'null' : Array.isArray(input) ? 'an array' : typeof input}. Send an object input, or use key: { header: true } with a header key on the server.`,
    );
  }
  const inputKey = readKey(input[field], `input.${field}`);
  if (inputKey !== undefined && contextKey !== undefined && inputKey !== contextKey) {
    throw new TypeError(
      `[idem] ${op.path} was given two different keys (input.${field} and context.idempotencyKey); pass one.`,
    );
  }
  const key = inputKey ?? contextKey ?? earlierKey ?? newIdempotencyKey();
  return { keyed: { ...op, input: { ...input, [field]: key } }, key };
}

function readKey(value: unknown, where: string): string | undefined {
  if (value === undefined || value === null || value === '') return undefined;
  if (typeof value !== 'string') throw new TypeError(`[idem] ${where} must be a string key`);
  return validateKey(value);
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (value === null || typeof value !== 'object') return false;
  const prototype = Object.getPrototypeOf(value);
  return prototype === Object.prototype || prototype === null;
}

function headerNeverSent(path: string, cause: unknown): Error {
  return new Error(
    `[idem] ${path} failed and was not retried: its Idempotency-Key header was never sent, so a retry could execute it again. Send it from the terminating link: httpLink({ url, headers: ({ op }) => idempotencyHeaders(op) }).`,
    { cause },
  );
}

/** What the client sees of an error: `TRPCClientError`'s fields, read without importing the class. */
interface ClientErrorLike {
  shape?: unknown;
  data?: {
    httpStatus?: number;
    code?: string;
    idempotency?: { code?: IdempotencyErrorCode; retryAfter?: number };
    idempotentReplayed?: boolean;
    idempotentResumable?: boolean;
  } | null;
  meta?: { response?: { headers?: { get(name: string): string | null } } };
}

/**
 * Whether a failed attempt may be repeated with the same key:
 * - no tRPC error body (fetch failed, the response was lost or was not tRPC's): `'network'`;
 * - a replay (`Idempotent-Replayed: true`, or in a batch `data.idempotentReplayed`): never, it is
 *   the stored outcome (E2, E4);
 * - a failure left resumable (`data.idempotentResumable`, or a lone call's `Idempotent-Resumable:
 *   true`): `'resumable'`, the same key completes the work (E8);
 * - `data.idempotency.code` (from `idempotencyErrorFormatter`): only `idempotency_request_in_progress`
 *   and `idempotency_store_unavailable`; without it, HTTP 409 / `CONFLICT` and 503 / `SERVICE_UNAVAILABLE`;
 * - anything else (400, 422, 500, …): never.
 */
function classifyTRPCError(
  error: unknown,
  now: () => number = Date.now,
): { reason: RetryReason; retryAfterMs?: number } | undefined {
  if (!(error instanceof Error) || error.name !== 'TRPCClientError') return undefined;
  const { shape, data, meta } = error as Error & ClientErrorLike;
  const headers = meta?.response?.headers;
  if (headers?.get(IDEMPOTENT_REPLAYED_HEADER) === 'true' || data?.idempotentReplayed === true) return undefined;
  if (data?.idempotentResumable === true || headers?.get(IDEMPOTENT_RESUMABLE_HEADER) === 'true')
    return { reason: 'resumable' };
  if (!shape && !data) return { reason: 'network' };

  const problem = data?.idempotency;
  const retryAfterSeconds = problem?.retryAfter;
  const retryAfterMs =
    typeof retryAfterSeconds === 'number'
      ? retryAfterSeconds * 1000
      : parseRetryAfter(headers?.get('retry-after'), now);
  const retry = (reason: RetryReason) => (retryAfterMs === undefined ? { reason } : { reason, retryAfterMs });
  if (problem?.code !== undefined) {
    if (problem.code === 'idempotency_request_in_progress') return retry('in_progress');
    if (problem.code === 'idempotency_store_unavailable') return retry('unavailable');
    return undefined;
  }
  if (data?.httpStatus === 409 || data?.code === 'CONFLICT') return retry('in_progress');
  if (data?.httpStatus === 503 || data?.code === 'SERVICE_UNAVAILABLE') return retry('unavailable');
  return undefined;
}

/** Options of {@link reconcile}. */
export interface ReconcileOptions {
  /** The procedure path the key was used on, e.g. `'payments.create'`. Required. */
  operation: string;
  /** Where the server mounted `idempotencyStatusProcedure`. Defaults to `'idempotency.status'`. */
  path?: string;
}

/**
 * Looks up what became of `key` on the server (its `idempotencyStatusProcedure`), through your
 * tRPC client and so with its usual links and headers, instead of sending the mutation again:
 * executed (when, with which status, and the value while it is replayable), not found, or still
 * processing. Use it once a `RetentionWindowExceededError` (or an app restart) left a key
 * unresolved:
 *
 * ```ts
 * const answer = await reconcile(trpc, error.key, { operation: 'payments.create' });
 * if (answer.kind === 'executed') show(`already paid at ${answer.at.toLocaleTimeString()} (${answer.status})`);
 * ```
 *
 * @throws TypeError `[idem] …` when `client` has no query procedure at `path`; whatever the query rejects with.
 */
export async function reconcile<TValue = unknown>(
  client: object,
  key: string,
  { operation, path = DEFAULT_STATUS_PATH }: ReconcileOptions,
): Promise<Reconciliation<TValue>> {
  validateKey(key);
  let node: unknown = client;
  for (const part of path.split('.')) node = (node as Record<string, unknown>)[part];
  const query = (node as { query?: unknown } | undefined)?.query;
  if (typeof query !== 'function')
    throw new TypeError(
      `[idem] reconcile: the tRPC client has no query procedure at ${path}; mount idempotencyStatusProcedure there, or pass its \`path\``,
    );
  let document: KeyStatusDocument | null;
  try {
    document = (await (query as (input: unknown) => Promise<unknown>)({ key, operation })) as KeyStatusDocument | null;
  } catch (error) {
    if ((error as ClientErrorLike | null)?.data?.code === 'NOT_FOUND')
      throw new Error(
        `[idem] reconcile: the server has no procedure at ${path}; mount idempotencyStatusProcedure there, or pass its \`path\``,
        { cause: error },
      );
    throw error;
  }
  return toReconciliation<TValue>(key, operation, document);
}

// `@idem/trpc/client` is this module: what a browser client needs, without the server middleware.
export {
  toReconciliation,
  type KeyGenerationStatus,
  type KeyStatusDocument,
  type Reconciliation,
} from '@idem/core/client';
export {
  RetentionWindowExceededError,
  RetriesExhaustedError,
  UnresolvedOperationError,
  loadRetentionPolicy,
  newIdempotencyKey,
  type ClientRetryOptions,
  type RetryNotice,
} from '@idem/core/client';
