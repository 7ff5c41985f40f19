/**
 * How the GraphQL clients reconcile a key instead of retrying it: the `idempotencyKeyStatus`
 * query (`@idem/envelop`'s `idempotencyKeyStatusTypeDefs`), and its answer as a typed
 * `Reconciliation` (SPEC R2, A1). Browser-safe: no `graphql` import. Internal to the package;
 * each client entry exports its own `reconcile`.
 */
import {
  toReconciliation,
  validateKey,
  type KeyGenerationStatus,
  type KeyStatusDocument,
  type Reconciliation,
} from '@idem/core/client';

/** The server's status field (`IDEMPOTENCY_KEY_STATUS_FIELD`), where `reconcile` looks by default. */
export const DEFAULT_STATUS_FIELD = 'idempotencyKeyStatus';

/** What the GraphQL clients' `reconcile` option and function take. */
export interface GraphQLReconcileOptions {
  /** The `Query` field the server mounted `idempotencyKeyStatusResolver` at. Defaults to `'idempotencyKeyStatus'`. */
  field?: string;
}

/** The status query, asking `field`. */
export function keyStatusQuery(field: string = DEFAULT_STATUS_FIELD): string {
  if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(field)) throw new TypeError(`[idem] reconcile: ${field} is not a field name`);
  return `query IdempotencyKeyStatus($key: String!, $operation: String!) {
  status: ${field}(key: $key, operation: $operation) {
    key operation
    generations { generation operation state firstSeenAt completedAt expiresAt archivedAt reusedAt status outcomeKind replayable outcome }
  }
}`;
}

/**
 * The operation a header key over these root fields is looked up by: `Mutation.<field>` for one
 * field, `mutation:<fields, sorted>` for several; `undefined` when they are unknown (fragments).
 */
export function statusOperationOf(rootFields: readonly string[]): string | undefined {
  if (rootFields.length === 0) return undefined;
  const names = [...new Set(rootFields)].sort();
  return names.length === 1 ? `Mutation.${names[0]}` : `mutation:${names.join(',')}`;
}

/**
 * The reconciliation a status query's `data` amounts to. `outcome` arrives as JSON text.
 * @throws Error `[idem] …` when the answer has errors (the server refused the query, or has no such field).
 */
export function reconciliationOf<T>(
  key: string,
  operation: string,
  answer: { data?: unknown; errors?: ReadonlyArray<{ message?: string }> | undefined },
): Reconciliation<T> {
  if (answer.errors?.length)
    throw new Error(`[idem] the key status query failed: ${answer.errors.map((error) => error.message).join('; ')}`);
  const status = (answer.data as { status?: unknown } | null | undefined)?.status;
  if (status === undefined)
    throw new Error('[idem] the key status query answered no `status`: is idempotencyKeyStatusResolver mounted?');
  if (status === null) return toReconciliation<T>(key, operation, null);
  const document = status as KeyStatusDocument & { generations: Array<KeyGenerationStatus & { outcome?: unknown }> };
  return toReconciliation<T>(key, operation, {
    ...document,
    generations: (document.generations ?? []).map(({ outcome, ...generation }) =>
      typeof outcome === 'string' ? { ...generation, outcome: JSON.parse(outcome) } : generation,
    ),
  });
}

export type Fetch = (input: RequestInfo | URL, init?: RequestInit) => Promise<Response>;

/**
 * Sends the status query for `key` to the GraphQL endpoint at `url` with `fetch`, the caller's
 * headers (its `Authorization`) and no `Idempotency-Key`.
 */
export async function lookUpOverFetch<T>({
  fetch,
  url,
  headers,
  key,
  operation,
  field,
}: {
  fetch: Fetch;
  url: RequestInfo | URL;
  headers?: HeadersInit | undefined;
  key: string;
  operation: string;
  field?: string | undefined;
}): Promise<Reconciliation<T>> {
  validateKey(key);
  const sent = new Headers(headers);
  sent.delete('idempotency-key');
  sent.set('content-type', 'application/json');
  sent.set('accept', 'application/graphql-response+json, application/json');
  const response = await fetch(url, {
    method: 'POST',
    headers: sent,
    body: JSON.stringify({ query: keyStatusQuery(field), variables: { key, operation } }),
  });
  let answer: { data?: unknown; errors?: Array<{ message?: string }> };
  try {
    answer = (await response.json()) as typeof answer;
  } catch {
    throw new Error(`[idem] the key status query answered ${response.status} without a GraphQL result`);
  }
  return reconciliationOf<T>(key, operation, answer);
}
