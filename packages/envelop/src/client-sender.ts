/**
 * How the GraphQL clients send a mutation over `fetch`: with one key for the whole logical
 * operation, retried with that key, never past the server's retention (SPEC K1, E3, E5, R2, R4).
 * `createIdempotentFetch` and the urql exchange are built on it. Internal to the package.
 */
import {
  DEFAULT_KEY_FIELD,
  type KeyOptions,
  createRetentionResolver,
  formatIdempotencyKey,
  IDEMPOTENCY_KEY_HEADER,
  IDEMPOTENT_REPLAYED_HEADER,
  IDEMPOTENT_RESUMABLE_HEADER,
  newIdempotencyKey,
  parseIdempotencyKey,
  parseRetryAfter,
  retryWithinRetention,
  type AttemptResult,
  type ClientRetryOptions,
  type RetentionSourceOptions,
  type RetryReason,
  UnresolvedOperations,
} from '@idem/core/client';
import { readMutation } from './client-operation.js';
import {
  DEFAULT_STATUS_FIELD,
  lookUpOverFetch,
  statusOperationOf,
  type GraphQLReconcileOptions,
} from './client-reconcile.js';

export type Fetch = (input: RequestInfo | URL, init?: RequestInit) => Promise<Response>;

/**
 * Options of {@link createIdempotentFetch}: the underlying `fetch`, where the retention comes
 * from (`retention` or `policyUrl`, exactly one), and the retry behaviour (`maxAttempts`,
 * `initialDelayMs`, `maxDelayMs`, `safetyMarginMs`, `onRetry`).
 */
export interface IdempotentFetchOptions extends ClientRetryOptions, RetentionSourceOptions {
  /** The `fetch` that sends the requests and reads `policyUrl`. Defaults to `globalThis.fetch`. */
  fetch?: Fetch;
  /**
   * The server's key field, in its words (`key.field`, here the key argument): an operation whose
   * root fields carry their own keys (this argument or `@idempotent(key:)`) is sent as it is,
   * without a header key and without retries. `{ field: false }` when the server reads no
   * argument. Defaults to `{ field: 'idempotencyKey' }`.
   */
  key?: Pick<KeyOptions, 'field'>;
  /**
   * When the retention stops the retries, look the key up instead of only throwing: the client
   * sends the server's `idempotencyKeyStatus` query (`field`) to the same URL with the same
   * headers, and the `RetentionWindowExceededError` carries the answer as `reconciliation`
   * (executed, not found or processing). Nothing is sent again: the app decides. `true` is
   * `{ field: 'idempotencyKeyStatus' }`. Defaults to `false`.
   */
  reconcile?: boolean | GraphQLReconcileOptions;
}

/**
 * The key of one logical operation, kept by the client layer that knows the operation (the urql
 * exchange keeps it in the operation's context): every `fetch` of that operation sends it, and
 * the deadline counts from its first attempt.
 */
export interface OperationKey {
  /** Set on the first send when `undefined`: the request's `Idempotency-Key` header, or a new UUID v4. */
  key: string | undefined;
  /** Set on the first send when `undefined`. */
  firstAttemptAt: number | undefined;
}

export interface SendOptions {
  /** The `fetch` for this request. Defaults to the options' `fetch`. */
  fetch?: Fetch | undefined;
  /** The operation's key. Without it, the sender keeps the keys of requests left unresolved. */
  operationKey?: OperationKey | undefined;
}

/**
 * A function sending `fetch` requests the way {@link createIdempotentFetch} describes. The key
 * of a mutation is, in order: the operation's (`operationKey`), the one of an earlier identical
 * request left unresolved (the same caller key, or without one the same URL and body), the
 * request's own `Idempotency-Key` header, or a new UUID v4.
 *
 * @throws TypeError `[idem] …` at once when neither or both of `retention` and `policyUrl` are given.
 */
export function createMutationSender(options: IdempotentFetchOptions, client: string) {
  const {
    fetch: defaultFetch = (input, init) => globalThis.fetch(input, init),
    retention,
    policyUrl,
    key: { field: argument = DEFAULT_KEY_FIELD } = {},
    reconcile = false,
    ...retryOptions
  } = options;
  const resolveRetention = createRetentionResolver({ retention, policyUrl, fetch: defaultFetch }, client);
  const now = retryOptions.now ?? Date.now;
  const unresolved = new UnresolvedOperations();
  const statusField =
    reconcile === false ? undefined : ((reconcile === true ? undefined : reconcile.field) ?? DEFAULT_STATUS_FIELD);

  return async function send(
    input: RequestInfo | URL,
    init: RequestInit | undefined,
    { fetch = defaultFetch, operationKey }: SendOptions = {},
  ): Promise<Response> {
    const mutation = typeof input === 'string' || input instanceof URL ? readMutation(init, argument) : undefined;
    if (!mutation) return fetch(input, init);

    const headers = new Headers(init?.headers);
    const headerKey = parseIdempotencyKey(headers.get(IDEMPOTENCY_KEY_HEADER));
    // Without an operation key, an identical request is the same operation sent again by a retry
    // layer above this one (Apollo's RetryLink, urql's retryExchange, a loop of the caller's).
    const identity = operationKey
      ? undefined
      : headerKey !== undefined
        ? `key ${headerKey}`
        : `${String(input)}\n${init!.body as string}`;
    const earlier = identity === undefined ? undefined : unresolved.take(identity);
    if (
      operationKey?.firstAttemptAt === undefined &&
      operationKey?.key !== undefined &&
      headerKey !== undefined &&
      headerKey !== operationKey.key
    ) {
      throw new TypeError(
        `[idem] a mutation was given two different keys (its operation's, ${operationKey.key}, and its Idempotency-Key header, ${headerKey}); pass one.`,
      );
    }
    // Once the operation was sent, its key wins over whatever header a retry carries.
    const key = (operationKey ? operationKey.key : earlier?.key) ?? headerKey ?? newIdempotencyKey();
    if (operationKey) operationKey.key = key;
    headers.set(IDEMPOTENCY_KEY_HEADER, formatIdempotencyKey(key));
    const request: RequestInit = { ...init, headers };
    const signal = init?.signal ?? undefined;

    let firstAttemptAt = operationKey?.firstAttemptAt ?? earlier?.firstAttemptAt;
    try {
      const retentionMs = await resolveRetention(
        'graphql',
        mutation.rootFields.map((field) => `Mutation.${field}`),
      );
      firstAttemptAt ??= now();
      if (operationKey) operationKey.firstAttemptAt = firstAttemptAt;
      const attempt = async (): Promise<AttemptResult<Response>> => {
        let response: Response;
        try {
          response = await fetch(input, request);
        } catch (error) {
          if (signal?.aborted) throw error;
          return { retry: { reason: 'network' }, error };
        }
        return classifyResponse(response, now);
      };
      const operation = statusOperationOf(mutation.rootFields);
      const lookUp =
        statusField === undefined
          ? undefined
          : () =>
              operation === undefined
                ? Promise.reject(
                    new Error(
                      '[idem] the mutation reaches its root fields through fragments: call reconcile(url, key, { operation }) instead',
                    ),
                  )
                : lookUpOverFetch({ fetch, url: input, headers, key, operation, field: statusField });
      return await retryWithinRetention(attempt, {
        ...retryOptions,
        key,
        retentionMs,
        firstAttemptAt,
        signal,
        ...(lookUp ? { lookUp } : {}),
      });
    } catch (error) {
      // The outcome is unknown (or nothing was sent): the next identical request keeps this key and deadline.
      if (identity !== undefined) unresolved.keep(identity, { key, firstAttemptAt: firstAttemptAt ?? now() });
      throw error;
    }
  };
}

const RETRYABLE_CODES: Record<string, RetryReason> = {
  IDEMPOTENCY_REQUEST_IN_PROGRESS: 'in_progress',
  IDEMPOTENCY_STORE_UNAVAILABLE: 'unavailable',
};

/**
 * Whether an answer of the server may be repeated with the same key: a failure marked
 * `Idempotent-Resumable: true` (E8: the mutation resumes its failures, and a retry completes the
 * work), and 409 and 503, unless they are a replay (a stored outcome, E2) or carry another
 * `extensions.code` than idem's in-progress / store-unavailable codes. Shared by the `fetch` and
 * the Apollo link.
 */
export function classifyAnswer(
  status: number,
  headers: { get(name: string): string | null },
  code: string | undefined,
  now: () => number,
): { reason: RetryReason; retryAfterMs?: number } | undefined {
  if (headers.get(IDEMPOTENT_REPLAYED_HEADER) === 'true') return undefined;
  if (isResumableAnswer(headers)) return { reason: 'resumable' };
  if (status !== 409 && status !== 503) return undefined;
  const reason = code === undefined ? (status === 409 ? 'in_progress' : 'unavailable') : RETRYABLE_CODES[code];
  if (!reason) return undefined;
  const retryAfterMs = parseRetryAfter(headers.get('retry-after'), now);
  return retryAfterMs === undefined ? { reason } : { reason, retryAfterMs };
}

/** The error kept for an answer that is retried: `[idem] the server answered 409 IDEMPOTENCY_REQUEST_IN_PROGRESS`. */
export function answerError(status: number, code: string | undefined): Error {
  return Object.assign(new Error(`[idem] the server answered ${status}${code ? ` ${code}` : ''}`), { status });
}

/** E8: whether the server marked its answer as a failure that left the key resumable. */
export function isResumableAnswer(headers: { get(name: string): string | null }): boolean {
  return headers.get(IDEMPOTENT_RESUMABLE_HEADER) === 'true';
}

async function classifyResponse(response: Response, now: () => number): Promise<AttemptResult<Response>> {
  if (
    (response.status !== 409 && response.status !== 503 && !isResumableAnswer(response.headers)) ||
    response.headers.get(IDEMPOTENT_REPLAYED_HEADER) === 'true'
  )
    return { done: response };
  const text = await response.text();
  const code = errorCode(text);
  const retry = classifyAnswer(response.status, response.headers, code, now);
  if (!retry)
    return {
      done: new Response(text, { status: response.status, statusText: response.statusText, headers: response.headers }),
    };
  return { retry, error: answerError(response.status, code) };
}

/** The `extensions.code` of the first error of a GraphQL response body. */
export function errorCode(body: string): string | undefined {
  try {
    const code = (JSON.parse(body) as { errors?: Array<{ extensions?: { code?: unknown } }> }).errors?.[0]?.extensions
      ?.code;
    return typeof code === 'string' ? code : undefined;
  } catch {
    return undefined;
  }
}
