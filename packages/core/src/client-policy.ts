/**
 * Client side: the retention of an endpoint, read from the server's published policy (R4), so
 * that a client's retries stop within it. Free of Node.js APIs, as the rest of `@idem/core/client`.
 */
import { toMilliseconds, type Duration } from './duration.js';

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
