/**
 * @idem/envelop/urql — an urql exchange that gives each mutation operation one
 * `Idempotency-Key`, keeps it in the operation's context across its own retries and those of
 * `retryExchange`, and stops retrying before the server's retention ends (SPEC K1, E3, E5, R2, R4).
 *
 * `@urql/core` (6) is a peer dependency of this entry only.
 */
import {
  makeOperation,
  mapExchange,
  type Client,
  type Exchange,
  type Operation,
  type OperationContext,
} from '@urql/core';
import { validateKey, type Reconciliation } from '@idem/core/client';
import { keyStatusQuery, reconciliationOf, type GraphQLReconcileOptions } from './client-reconcile.js';
import { createMutationSender, type IdempotentFetchOptions, type OperationKey } from './client-sender.js';

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
 * Options of {@link idempotencyExchange}: where the retention comes from (`retention` or
 * `policyUrl`, exactly one), the server's key field (`key.field`), and the retry behaviour
 * (`maxAttempts`, `initialDelayMs`, `maxDelayMs`, `safetyMarginMs`, `onRetry`). `fetch` reads
 * `policyUrl`; the mutations go through the client's `fetch` (or the operation's).
 */
export type IdempotencyExchangeOptions = IdempotentFetchOptions;

/**
 * What a caller may put in a mutation's context (`client.mutation(query, variables, context)`)
 * to resume a known key instead of getting a new one.
 */
export interface IdempotencyOperationContext {
  /** The operation's key. Defaults to the request's `Idempotency-Key` header (`fetchOptions`), or a new UUID v4. */
  idempotencyKey?: string;
  /**
   * When this key was first sent (ms since the epoch, e.g. the `firstAttemptAt` of an earlier
   * `RetriesExhaustedError`), so the retention is counted from its first use. Defaults to the
   * operation's first attempt.
   */
  idempotencyFirstAttemptAt?: number;
}

/** Operations this exchange has keyed: the key travels with their context, into every retry. */
const KEYED = Symbol.for('idem.urql.operationKey');

type KeyedContext = Operation['context'] & { [KEYED]?: OperationKey };

/**
 * An urql exchange that makes mutations safe to retry (queries and subscriptions pass through
 * untouched). For a mutation operation it:
 *
 * - gives it a key (the context's `idempotencyKey`, the `Idempotency-Key` header of its
 *   `fetchOptions`, or a new UUID v4), kept in its context — `retryExchange` re-sends the same
 *   operation, so its retries carry the same key — and sent as the `Idempotency-Key` header;
 * - sends it through the operation's `fetch` (the client's), retrying network failures, 409
 *   (E3), 503 (E5) and failures marked `Idempotent-Resumable: true` (E8) with that key, waiting at
 *   least `Retry-After`; every other answer (400, 422, a replay, an unmarked 500 included) is the result;
 * - starts no attempt within the safety margin of the retention of `Mutation.<field>`, counted
 *   from the key's first attempt, also when `retryExchange` re-sends it: the result's
 *   `error.networkError` is a `RetentionWindowExceededError`, telling the caller to reconcile.
 *
 * Put it before `fetchExchange` (after `retryExchange`, if you have one):
 *
 * ```ts
 * createClient({ url, exchanges: [cacheExchange, retryExchange({}), idempotencyExchange({ policyUrl: 'https://api.example.com/idempotency' }), fetchExchange] });
 * ```
 *
 * @throws TypeError `[idem] …` at once when neither or both of `retention` and `policyUrl` are given.
 */
export function idempotencyExchange(options: IdempotencyExchangeOptions): Exchange {
  const send = createMutationSender(options, 'idempotencyExchange');
  return mapExchange({
    onOperation(operation) {
      const context = operation.context as KeyedContext;
      if (operation.kind !== 'mutation' || context[KEYED]) return operation;
      const fetch = context.fetch;
      let operationKey: OperationKey;
      let keyed: typeof send;
      try {
        operationKey = {
          key: readKey(context['idempotencyKey'], 'idempotencyKey'),
          firstAttemptAt: readFirstAttemptAt(context['idempotencyFirstAttemptAt']),
        };
        keyed = (input, init) => send(input, init, { fetch, operationKey });
      } catch (error) {
        // Thrown here, the error would end the client's operation stream: it becomes this result's networkError.
        operationKey = { key: undefined, firstAttemptAt: undefined };
        keyed = () => Promise.reject(error);
      }
      return makeOperation(operation.kind, operation, {
        ...context,
        [KEYED]: operationKey,
        fetch: keyed,
      } as KeyedContext);
    },
  });
}

function readKey(value: unknown, name: string): string | undefined {
  if (value === undefined || value === null || value === '') return undefined;
  if (typeof value !== 'string') throw new TypeError(`[idem] context.${name} must be a string key`);
  return validateKey(value);
}

function readFirstAttemptAt(value: unknown): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'number' || !Number.isFinite(value))
    throw new TypeError('[idem] context.idempotencyFirstAttemptAt must be a time in milliseconds since the epoch');
  return value;
}

/** Options of {@link reconcile}. */
export interface ReconcileOptions extends GraphQLReconcileOptions {
  /** The unit the key was used on: `Mutation.<field>`. Required. */
  operation: string;
  /** The query's context (`fetchOptions` with the caller's headers, …). Defaults to the client's. */
  context?: Partial<OperationContext>;
}

/**
 * Looks up what became of `key` on the server (its `idempotencyKeyStatus` field) through your
 * urql client, instead of sending the mutation again: executed (when, with which status, and the
 * stored result while it is replayable), not found, or still processing.
 *
 * @throws Error `[idem] …` when the server refuses the query (a malformed key: 400) or has no such field.
 */
export async function reconcile<T = unknown>(
  client: Client,
  key: string,
  { operation, context, field }: ReconcileOptions,
): Promise<Reconciliation<T>> {
  validateKey(key);
  const result = await client
    .query(keyStatusQuery(field), { key, operation }, { requestPolicy: 'network-only', ...context })
    .toPromise();
  if (result.error?.networkError) throw result.error.networkError;
  return reconciliationOf<T>(key, operation, { data: result.data, errors: result.error?.graphQLErrors });
}
