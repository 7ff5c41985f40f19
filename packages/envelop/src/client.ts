/**
 * @idem/envelop/client — a `fetch` for GraphQL clients (graphql-request, plain `fetch`, any
 * client that takes a `fetch`) that sends each mutation with one `Idempotency-Key`, keeps it
 * across retries, and stops retrying before the server's retention ends (SPEC K1, E3, E5, R2,
 * R4). Apollo Client and urql have their own entries (`/apollo`, `/urql`), which keep the key
 * with the operation.
 *
 * Nothing here imports the server side or `graphql`: `@0no-co/graphql.web`, the parser urql
 * ships, reads the request's document, and decides whether its root fields carry their own keys
 * as the server does (fragments followed, `@skip`/`@include` applied, variable defaults read).
 */
import type { Reconciliation } from '@idem/core/client';
import { lookUpOverFetch, type GraphQLReconcileOptions } from './client-reconcile.js';
import { createMutationSender, type Fetch, type IdempotentFetchOptions } from './client-sender.js';

export {
  RetentionWindowExceededError,
  RetriesExhaustedError,
  UnresolvedOperationError,
  newIdempotencyKey,
  loadRetentionPolicy,
  type ClientRetryOptions,
  type RetryNotice,
} from '@idem/core/client';
export { describeOperation, type OperationDescription, type RootField } from './client-operation.js';
export type { IdempotentFetchOptions } from './client-sender.js';
export type { GraphQLReconcileOptions } from './client-reconcile.js';
export {
  toReconciliation,
  type KeyGenerationStatus,
  type KeyStatusDocument,
  type Reconciliation,
} from '@idem/core/client';

/**
 * A `fetch` that makes GraphQL mutations safe to retry. For a `POST` whose JSON body runs a
 * mutation operation it:
 *
 * - adds an `Idempotency-Key` header (a UUID v4 as an sf-string), or keeps the caller's;
 * - retries network failures, 409 (`IDEMPOTENCY_REQUEST_IN_PROGRESS`, E3), 503
 *   (`IDEMPOTENCY_STORE_UNAVAILABLE`, E5) and failures marked `Idempotent-Resumable: true` (E8: the
 *   mutation resumes its failures) with the same key, waiting at least `Retry-After`;
 * - returns every other response as it is (400, 422, a replay, an unmarked 500 included);
 * - starts no retry within the safety margin of the retention of `Mutation.<field>` (from
 *   `retention` or the published policy): it rejects with a `RetentionWindowExceededError`,
 *   telling the caller to reconcile instead;
 * - when it rejects (the outcome is unknown), remembers the key: the next identical request — the
 *   same caller key, or without one the same URL and body — is taken as a retry of the same
 *   operation by a layer above (Apollo's `RetryLink`, urql's `retryExchange`, a loop of yours)
 *   and carries the same key, within the same deadline. A response forgets it.
 *
 * Everything else — queries, `GET`s, batched bodies (a JSON array), non-JSON bodies (file
 * uploads), and mutations whose root fields carry their own argument or directive keys — goes
 * straight to the underlying `fetch`.
 *
 * ```ts
 * const client = new GraphQLClient('https://api.example.com/graphql', { fetch: createIdempotentFetch({ policyUrl: 'https://api.example.com/idempotency' }) });
 * ```
 *
 * @throws TypeError `[idem] …` at once when neither or both of `retention` and `policyUrl` are given.
 */
export function createIdempotentFetch(options: IdempotentFetchOptions): Fetch {
  const send = createMutationSender(options, 'createIdempotentFetch');
  return (input, init) => send(input, init);
}

/** Options of {@link reconcile}. */
export interface ReconcileOptions extends GraphQLReconcileOptions {
  /** The unit the key was used on: `Mutation.<field>` (a header key over that one field, or a key argument). Required. */
  operation: string;
  /** The caller's usual headers (its `Authorization`); an `Idempotency-Key` among them is left out. Defaults to none. */
  headers?: HeadersInit;
  /** The `fetch` that sends the query. Defaults to `globalThis.fetch`. */
  fetch?: Fetch;
}

/**
 * Looks up what became of `key` on the GraphQL endpoint at `url` (its `idempotencyKeyStatus`
 * field) instead of sending the mutation again: executed (when, with which status, and the
 * stored result while it is replayable), not found, or still processing.
 *
 * ```ts
 * const answer = await reconcile('https://api.example.com/graphql', error.key, { operation: 'Mutation.createPayment', headers: { authorization } });
 * ```
 *
 * @throws Error `[idem] …` when the server refuses the query (a malformed key: 400) or has no such field.
 */
export function reconcile<T = unknown>(
  url: string | URL,
  key: string,
  { operation, headers, fetch = (input, init) => globalThis.fetch(input, init), field }: ReconcileOptions,
): Promise<Reconciliation<T>> {
  return lookUpOverFetch<T>({ fetch, url, headers, key, operation, field });
}
