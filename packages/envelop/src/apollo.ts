/**
 * @idem/envelop/apollo — an Apollo Client 4 link that gives each mutation operation one
 * `Idempotency-Key`, keeps it in the operation's context across its own retries and those of
 * `RetryLink`, and stops retrying before the server's retention ends (SPEC K1, E3, E5, R2, R4).
 *
 * `@apollo/client` (4) and `rxjs` are peer dependencies of this entry only.
 */
import { ApolloLink } from '@apollo/client/link';
import { CombinedGraphQLErrors, ServerError, ServerParseError } from '@apollo/client/errors';
import { Observable, type Subscription } from 'rxjs';
import {
  DEFAULT_KEY_FIELD,
  type KeyOptions,
  createRetentionResolver,
  formatIdempotencyKey,
  IDEMPOTENCY_KEY_HEADER,
  newIdempotencyKey,
  parseIdempotencyKey,
  retryWithinRetention,
  validateKey,
  type AttemptResult,
  type ClientRetryOptions,
  type Reconciliation,
  type RetentionSourceOptions,
  type RetryReason,
} from '@idem/core/client';
import { parse } from '@0no-co/graphql.web';
import { describeDocument, keyedMutation } from './client-operation.js';
import {
  DEFAULT_STATUS_FIELD,
  keyStatusQuery,
  reconciliationOf,
  statusOperationOf,
  type GraphQLReconcileOptions,
} from './client-reconcile.js';
import { answerError, classifyAnswer, errorCode, isResumableAnswer } from './client-sender.js';

export {
  RetentionWindowExceededError,
  RetriesExhaustedError,
  UnresolvedOperationError,
  newIdempotencyKey,
  loadRetentionPolicy,
  type ClientRetryOptions,
  type RetryNotice,
  toReconciliation,
  type KeyGenerationStatus,
  type KeyStatusDocument,
  type Reconciliation,
} from '@idem/core/client';
export type { GraphQLReconcileOptions } from './client-reconcile.js';

/**
 * Options of {@link idempotencyLink}: where the retention comes from (`retention` or
 * `policyUrl`, exactly one), and the retry behaviour (`maxAttempts`, `initialDelayMs`,
 * `maxDelayMs`, `safetyMarginMs`, `onRetry`).
 */
export interface IdempotencyLinkOptions extends ClientRetryOptions, RetentionSourceOptions {
  /** The `fetch` that reads `policyUrl`. Defaults to `globalThis.fetch`. */
  fetch?: (input: string, init?: RequestInit) => Promise<Response>;
  /**
   * The server's key field, in its words (`key.field`, here the key argument): an operation whose
   * root fields carry their own keys (this argument or `@idempotent(key:)`) passes through,
   * without a header key and without retries. `{ field: false }` when the server reads no
   * argument. Defaults to `{ field: 'idempotencyKey' }`.
   */
  key?: Pick<KeyOptions, 'field'>;
  /**
   * When the retention stops the retries, look the key up instead of only throwing: the link
   * sends the server's `idempotencyKeyStatus` query (`field`) through the client
   * (`operation.client`), with the mutation's headers, and the `RetentionWindowExceededError`
   * carries the answer as `reconciliation` (executed, not found or processing). Nothing is sent
   * again: the app decides. `true` is `{ field: 'idempotencyKeyStatus' }`. Defaults to `false`.
   */
  reconcile?: boolean | GraphQLReconcileOptions;
}

/**
 * What the link keeps in a mutation's context, and what a caller may put there
 * (`client.mutate({ mutation, context })`) to resume a known key instead of getting a new one.
 */
export interface IdempotencyOperationContext {
  /** The operation's key. Defaults to the context's `Idempotency-Key` header, or a new UUID v4. */
  idempotencyKey?: string;
  /**
   * When this key was first sent (ms since the epoch, e.g. the `firstAttemptAt` of an earlier
   * `RetriesExhaustedError`), so the retention is counted from its first use. Defaults to the
   * link's first attempt.
   */
  idempotencyFirstAttemptAt?: number;
}

type Result = ApolloLink.Result;
type Event = { kind: 'next'; result: Result } | { kind: 'error'; error: unknown } | { kind: 'complete' };

/**
 * An Apollo Client link that makes mutations safe to retry (queries and subscriptions pass
 * through untouched):
 *
 * - each mutation operation gets a key (a UUID v4, the context's `idempotencyKey`, or an
 *   `Idempotency-Key` in the context's `headers`), kept in its context — so `RetryLink`, which
 *   retries the same operation, sends the same key — and sent as the `Idempotency-Key` header;
 * - network failures, 409 (still processing, E3), 503 (store unavailable, E5) and failures the
 *   server left resumable (E8: `onFailure: 'resume'`, `extensions.idempotency.resumable` or
 *   `Idempotent-Resumable: true`) are retried with that key and jittered exponential back-off,
 *   waiting at least the server's `Retry-After`;
 * - every other answer (400, 422, a replay, an unmarked 500 included) is passed on as it is;
 * - no attempt starts within the safety margin of the retention of `Mutation.<field>` (from
 *   `retention` or the published policy at `policyUrl`), counted from the key's first attempt,
 *   also when `RetryLink` calls the link again: the operation fails with a
 *   `RetentionWindowExceededError`, telling the caller to reconcile instead.
 *
 * Put it after `RetryLink` (if you have one) and before the terminating `HttpLink`:
 *
 * ```ts
 * new ApolloClient({
 *   cache: new InMemoryCache(),
 *   link: ApolloLink.from([new RetryLink(), idempotencyLink({ policyUrl: 'https://api.example.com/idempotency' }), new HttpLink({ uri })]),
 * });
 * ```
 *
 * @throws TypeError `[idem] …` at once when neither or both of `retention` and `policyUrl` are given.
 */
export function idempotencyLink(options: IdempotencyLinkOptions): ApolloLink {
  const {
    retention,
    policyUrl,
    fetch,
    key: { field: argument = DEFAULT_KEY_FIELD } = {},
    reconcile: lookUpOption = false,
    ...retryOptions
  } = options;
  const resolveRetention = createRetentionResolver({ retention, policyUrl, fetch }, 'idempotencyLink');
  const now = retryOptions.now ?? Date.now;
  const statusField =
    lookUpOption === false
      ? undefined
      : ((lookUpOption === true ? undefined : lookUpOption.field) ?? DEFAULT_STATUS_FIELD);

  return new ApolloLink((operation, forward) => {
    if (operation.operationType !== 'mutation') return forward(operation);
    const mutation = keyedMutation(
      describeDocument(operation.query, operation.operationName),
      argument,
      operation.variables,
    );
    if (!mutation) return forward(operation);

    return new Observable<Result>((observer) => {
      const controller = new AbortController();
      let current: Subscription | undefined;
      let disposed = false;
      // Events of the answer taken, held until the retry loop has returned it.
      const held: Event[] = [];
      let deliver: ((event: Event) => void) | undefined;
      const emit = (event: Event) => (deliver ? deliver(event) : held.push(event));

      const attempt = () =>
        new Promise<AttemptResult<undefined>>((resolve, reject) => {
          let state = 'waiting' as 'waiting' | 'taken' | 'dropped';
          let subscription: Subscription | undefined;
          const drop = () => {
            state = 'dropped';
            subscription?.unsubscribe();
          };
          subscription = forward(operation).subscribe({
            next(result) {
              if (state === 'taken') return emit({ kind: 'next', result });
              if (state === 'dropped') return;
              const retry = classifyResult(result, operation.getContext().response, now);
              if (retry) {
                drop();
                return resolve(retry);
              }
              state = 'taken';
              emit({ kind: 'next', result });
              resolve({ done: undefined });
            },
            error(error) {
              if (state === 'taken') return emit({ kind: 'error', error });
              if (state === 'dropped') return;
              state = 'dropped';
              const retry = controller.signal.aborted ? undefined : classifyError(error, now);
              if (retry) resolve({ retry, error });
              else reject(error);
            },
            complete() {
              if (state === 'dropped') return;
              state = 'taken';
              emit({ kind: 'complete' });
              resolve({ done: undefined });
            },
          });
          if (state === 'dropped') subscription.unsubscribe();
          current = subscription;
        });

      const run = async () => {
        const { key, firstAttemptAt } = keyOperation(operation, now);
        const retentionMs = await resolveRetention(
          'graphql',
          mutation.rootFields.map((field) => `Mutation.${field}`),
        );
        const statusOperation = statusOperationOf(mutation.rootFields);
        const lookUp = () => {
          if (statusOperation === undefined)
            return Promise.reject(
              new Error(
                '[idem] the mutation reaches its root fields through fragments: call reconcile(client, key, { operation }) instead',
              ),
            );
          const { [IDEMPOTENCY_KEY_HEADER]: _key, ...headers } = operation.getContext()['headers'] as Record<
            string,
            string
          >;
          return reconcile(operation.client, key, {
            operation: statusOperation,
            field: statusField,
            context: { headers },
          });
        };
        return retryWithinRetention(attempt, {
          ...retryOptions,
          key,
          retentionMs,
          firstAttemptAt,
          signal: controller.signal,
          ...(statusField === undefined ? {} : { lookUp }),
        });
      };

      run().then(
        () => {
          if (disposed) return;
          deliver = (event) => {
            if (event.kind === 'next') observer.next(event.result);
            else if (event.kind === 'error') observer.error(event.error);
            else observer.complete();
          };
          for (const event of held.splice(0)) deliver(event);
        },
        (error: unknown) => {
          if (!disposed) observer.error(error);
        },
      );
      return () => {
        disposed = true;
        controller.abort();
        current?.unsubscribe();
      };
    });
  });
}

/**
 * The operation's key and first attempt, set in its context the first time the link sees it
 * (with the `Idempotency-Key` header the terminating link sends) and read back every time after.
 */
function keyOperation(operation: ApolloLink.Operation, now: () => number): { key: string; firstAttemptAt: number } {
  const context = operation.getContext();
  const contextKey = readKey(context['idempotencyKey'], 'context.idempotencyKey');
  const headers: Record<string, string> = { ...(context['headers'] as Record<string, string> | undefined) };
  const headerName = Object.keys(headers).find((name) => name.toLowerCase() === IDEMPOTENCY_KEY_HEADER.toLowerCase());
  const headerKey = headerName === undefined ? undefined : parseIdempotencyKey(headers[headerName]);
  const firstAttemptAt = context['idempotencyFirstAttemptAt'];
  const resumed = typeof firstAttemptAt === 'number';
  if (!resumed && contextKey !== undefined && headerKey !== undefined && contextKey !== headerKey) {
    throw new TypeError(
      `[idem] ${operation.operationName ?? 'a mutation'} was given two different keys (context.idempotencyKey and its Idempotency-Key header); pass one.`,
    );
  }
  const key = contextKey ?? headerKey ?? newIdempotencyKey();
  if (headerName !== undefined) delete headers[headerName];
  headers[IDEMPOTENCY_KEY_HEADER] = formatIdempotencyKey(key);
  const first = resumed ? firstAttemptAt : now();
  operation.setContext({ idempotencyKey: key, idempotencyFirstAttemptAt: first, headers });
  return { key, firstAttemptAt: first };
}

function readKey(value: unknown, where: string): string | undefined {
  if (value === undefined || value === null || value === '') return undefined;
  if (typeof value !== 'string') throw new TypeError(`[idem] ${where} must be a string key`);
  return validateKey(value);
}

/**
 * Whether an answer that arrived as a result may be repeated with the same key. `HttpLink`
 * turns a 409 or 503 in `application/graphql-response+json` into a result; the status and
 * `Retry-After` come from the response it keeps in the context.
 */
function classifyResult(result: Result, response: unknown, now: () => number): AttemptResult<undefined> | undefined {
  const extensions = (result as { extensions?: { idempotency?: { replayed?: unknown; resumable?: unknown } } })
    .extensions;
  if (extensions?.idempotency?.replayed === true) return undefined;
  // E8: a failure the server left resumable (`extensions.idempotency.resumable`, `Idempotent-Resumable`).
  if (extensions?.idempotency?.resumable === true || (isResponse(response) && isResumableAnswer(response.headers)))
    return {
      retry: { reason: 'resumable' },
      error: answerError(isResponse(response) ? response.status : 500, 'resumable'),
    };
  const first = (
    result as { errors?: ReadonlyArray<{ extensions?: { code?: unknown; idempotency?: { retryAfter?: unknown } } }> }
  ).errors?.[0];
  const code = typeof first?.extensions?.code === 'string' ? first.extensions.code : undefined;
  if (code === undefined) return undefined;
  const retryAfter = first?.extensions?.idempotency?.retryAfter;
  let retry: { reason: RetryReason; retryAfterMs?: number } | undefined;
  if (isResponse(response)) {
    retry = classifyAnswer(response.status, response.headers, code, now);
    return retry ? { retry, error: answerError(response.status, code) } : undefined;
  }
  // Another terminating link than HttpLink: only idem's own codes tell.
  const reason: RetryReason | undefined =
    code === 'IDEMPOTENCY_REQUEST_IN_PROGRESS'
      ? 'in_progress'
      : code === 'IDEMPOTENCY_STORE_UNAVAILABLE'
        ? 'unavailable'
        : undefined;
  if (!reason) return undefined;
  retry = typeof retryAfter === 'number' ? { reason, retryAfterMs: retryAfter * 1000 } : { reason };
  return { retry, error: answerError(reason === 'in_progress' ? 409 : 503, code) };
}

/** A `fetch` `Response`, from any implementation of `fetch`. */
function isResponse(value: unknown): value is { status: number; headers: { get(name: string): string | null } } {
  const candidate = value as { status?: unknown; headers?: { get?: unknown } } | null | undefined;
  return typeof candidate?.status === 'number' && typeof candidate.headers?.get === 'function';
}

/**
 * Whether a failed attempt may be repeated with the same key: a `ServerError` (a non-2xx answer
 * in `application/json`) like an answer; a response that could not be parsed, or GraphQL errors,
 * never; any other failure (`fetch` threw, the connection was lost) is a network failure.
 */
function classifyError(error: unknown, now: () => number): { reason: RetryReason; retryAfterMs?: number } | undefined {
  if (ServerError.is(error))
    return classifyAnswer(error.statusCode, error.response.headers, errorCode(error.bodyText), now);
  if (ServerParseError.is(error) || CombinedGraphQLErrors.is(error)) return undefined;
  return { reason: 'network' };
}

/** Options of {@link reconcile}. */
export interface ReconcileOptions extends GraphQLReconcileOptions {
  /** The unit the key was used on: `Mutation.<field>`. Required. */
  operation: string;
  /** The query's context (`headers` with the caller's `Authorization`, …). Defaults to none. */
  context?: Record<string, unknown>;
}

/**
 * Looks up what became of `key` on the server (its `idempotencyKeyStatus` field) through your
 * Apollo Client (its links, not its cache), instead of sending the mutation again: executed
 * (when, with which status, and the stored result while it is replayable), not found, or still
 * processing.
 *
 * @throws Error `[idem] …` when the server refuses the query (a malformed key: 400) or has no such field.
 */
export async function reconcile<T = unknown>(
  client: ApolloLink.Operation['client'],
  key: string,
  { operation, context, field }: ReconcileOptions,
): Promise<Reconciliation<T>> {
  validateKey(key);
  const { data } = await client.query({
    query: parse(keyStatusQuery(field)) as Parameters<typeof client.query>[0]['query'],
    variables: { key, operation },
    fetchPolicy: 'no-cache',
    ...(context ? { context } : {}),
  });
  return reconciliationOf<T>(key, operation, { data });
}
