import { formatDuration } from './duration.js';
import { escapeHtml } from './html.js';
import { problemType, type IdempotencyErrorCode } from './errors.js';

/** One idempotent endpoint, as published (R4). */
export interface EndpointPolicyDescription {
  /** How clients call it, e.g. `tRPC mutation payments.create` or `GraphQL Mutation.createPayment`. */
  endpoint: string;
  /** Machine-readable: `trpc`, `graphql`, or `http` for a plain HTTP route (`@idem/fetch`). */
  transport: 'trpc' | 'graphql' | 'http';
  /** Machine-readable: the tRPC procedure path (`payments.create`), GraphQL root field (`Mutation.createPayment`) or HTTP route (`POST /v1/payments`). Clients look their retention up by it. */
  operation: string;
  /** Where the key is read from, e.g. `Idempotency-Key header`, `input field idempotencyKey`. */
  keySources: string[];
  /** Whether a request without a key is refused with 400 (K2). */
  required: boolean;
  retentionMs: number;
  leaseMs: number;
  /**
   * E3w: how long a duplicate that finds the key in progress waits for the outcome before it
   * answers 409 (`wait`); 0 when it answers 409 at once (E3). Optional: absent reads as 0.
   */
  waitMs?: number;
  expiredReuse: 'execute' | 'reject';
  /**
   * E8: what a failure after the handler started does: `'replay'` (Stripe v1), stored and
   * replayed like any outcome; `'resume'` (Stripe v2), answered with `Idempotent-Resumable: true`
   * and completed by a retry with the same key and payload (steps already done are not repeated),
   * a final failure (4xx) replayed. Optional: absent reads as `'replay'`.
   */
  onFailure?: 'replay' | 'resume';
  /** What is stored and replayed, in words. */
  stored: string;
  /** What the fingerprint covers, in words (F1/F2). */
  fingerprint: string;
}

/** The published retention policy (draft §2.3, SPEC R4), generated from the configuration. */
export interface PolicyDocument {
  title: string;
  /** The URL this document is served at; each problem's `type` is this URL with the problem's code as fragment. */
  documentationUrl: string;
  endpoints: Array<
    EndpointPolicyDescription & {
      retention: string;
      lease: string;
      waitMs: number;
      wait: string;
      onFailure: 'replay' | 'resume';
    }
  >;
  /**
   * The problems a client can meet, and what to do about each. `type` is the problem type of
   * problem bodies (`<documentationUrl>#<code>`); the HTML page has an anchor for each.
   */
  statuses: Array<{ status: number; code: IdempotencyErrorCode; type: string; meaning: string; clientAction: string }>;
  /** Advice derived from the shortest retention. */
  clientGuidance: string;
}

const STATUSES: Array<Omit<PolicyDocument['statuses'][number], 'type'>> = [
  {
    status: 400,
    code: 'idempotency_key_missing',
    meaning: 'The endpoint requires an Idempotency-Key and none was sent (K2).',
    clientAction: 'Send a key: a UUID v4 as a quoted string.',
  },
  {
    status: 400,
    code: 'idempotency_key_invalid',
    meaning:
      'The key is longer than 255 characters or has characters outside visible ASCII, or a quote or backslash (K3).',
    clientAction: 'Fix the key; nothing was executed.',
  },
  {
    status: 400,
    code: 'idempotency_key_ambiguous',
    meaning: 'Two different keys were sent for one operation (K4).',
    clientAction: 'Send one key.',
  },
  {
    status: 400,
    code: 'idempotency_input_too_deep',
    meaning: 'The input is nested deeper than the fingerprint reads (F1).',
    clientAction: 'Send a flatter input; nothing was executed.',
  },
  {
    status: 400,
    code: 'idempotency_scope_too_long',
    meaning: 'The principal and operation of the request are longer than the store can key (S1).',
    clientAction: 'Do not retry unchanged; nothing was executed. Act as a principal with a shorter id.',
  },
  {
    status: 409,
    code: 'idempotency_request_in_progress',
    meaning: 'A request with this key is still being processed (E3).',
    clientAction: 'Wait Retry-After seconds, then retry with the same key and payload.',
  },
  {
    status: 422,
    code: 'idempotency_key_reused',
    meaning: 'The key was used with a different payload (F3).',
    clientAction: 'Do not retry: use a new key for a new request.',
  },
  {
    status: 422,
    code: 'idempotency_key_expired',
    meaning: 'The key is past its retention and this endpoint refuses reuse (R2).',
    clientAction: 'Reconcile the earlier request; send a new request with a new key.',
  },
  {
    status: 503,
    code: 'idempotency_store_unavailable',
    meaning: 'The idempotency store is unreachable; nothing was executed (E5).',
    clientAction: 'Retry after Retry-After seconds with the same key.',
  },
];

/**
 * An endpoint to publish: its transport and operation, and whatever differs from the adapters'
 * defaults. `endpoint` defaults to `tRPC mutation <operation>`, `GraphQL <operation>` or
 * `HTTP <operation>` (`HTTP POST /api/orders`),
 * `keySources` to the `Idempotency-Key` header, `required` to true, `retentionMs` to 24 hours
 * (30 days with `onFailure: 'resume'`), `leaseMs` to 30 seconds, `expiredReuse` to `'execute'`,
 * `onFailure` to `'replay'` (the engine's defaults), `stored` to what
 * the adapter stores and `fingerprint` to the default fingerprint's description.
 */
export type PublishedEndpoint = Pick<EndpointPolicyDescription, 'transport' | 'operation'> &
  Partial<EndpointPolicyDescription>;

const DAY_MS = 86_400_000;
const LEASE_MS = 30_000;

/** What each transport's adapter names, stores and fingerprints by default, in words (R4, E4, F1). */
const TRANSPORT_DEFAULTS: Record<
  EndpointPolicyDescription['transport'],
  { endpoint: (operation: string) => string; stored: string; fingerprint: string }
> = {
  trpc: {
    endpoint: (operation) => `tRPC mutation ${operation}`,
    stored: 'the output, or the error once the procedure started (500s included)',
    fingerprint: 'SHA-256 of the validated input, the key field left out',
  },
  graphql: {
    endpoint: (operation) => `GraphQL ${operation}`,
    stored: 'the result, data and errors',
    fingerprint: 'SHA-256 of the normalized operation document and its variables',
  },
  http: {
    endpoint: (operation) => `HTTP ${operation}`,
    stored: "the response: its status, its body's bytes and the headers that describe it (never Set-Cookie)",
    fingerprint:
      'SHA-256 of the method, the path, the content type and the body (a JSON body parsed, the key field left out)',
  },
};

/** `endpoint` with the defaults {@link PublishedEndpoint} names filled in, worded for its transport. */
export function describeEndpoint(endpoint: PublishedEndpoint): EndpointPolicyDescription {
  const defaults = TRANSPORT_DEFAULTS[endpoint.transport];
  return {
    endpoint: defaults.endpoint(endpoint.operation),
    keySources: ['Idempotency-Key header'],
    required: true,
    retentionMs: endpoint.onFailure === 'resume' ? 30 * DAY_MS : DAY_MS,
    leaseMs: LEASE_MS,
    expiredReuse: 'execute',
    onFailure: 'replay',
    stored: defaults.stored,
    fingerprint: defaults.fingerprint,
    ...Object.fromEntries(Object.entries(endpoint).filter(([, value]) => value !== undefined)),
  } as EndpointPolicyDescription;
}

export function createPolicyDocument(options: {
  title?: string;
  documentationUrl: string;
  endpoints: readonly PublishedEndpoint[];
}): PolicyDocument {
  const endpoints = options.endpoints.map(describeEndpoint).map((endpoint) => ({
    ...endpoint,
    retention: formatDuration(endpoint.retentionMs),
    lease: formatDuration(endpoint.leaseMs),
    waitMs: endpoint.waitMs ?? 0,
    wait: endpoint.waitMs ? formatDuration(endpoint.waitMs) : 'none (409 at once)',
    onFailure: endpoint.onFailure ?? 'replay',
  }));
  const shortest = Math.min(...endpoints.map((endpoint) => endpoint.retentionMs));
  return {
    title: options.title ?? 'Idempotency policy',
    documentationUrl: options.documentationUrl,
    endpoints,
    statuses: STATUSES.map((status) => ({ ...status, type: problemType(options.documentationUrl, status.code) })),
    clientGuidance: Number.isFinite(shortest)
      ? `Keep every retry with the same key within ${formatDuration(shortest)} of the first attempt (the shortest retention here). A retry after an endpoint's retention is executed as a new request${endpoints.some((e) => e.expiredReuse === 'reject') ? ' (or refused with 422 where reuse is rejected)' : ''}: past it, reconcile instead of retrying. ${failureGuidance(endpoints)}`
      : 'No idempotent endpoints are configured.',
  };
}

/** E8: what a client may do with a failure, for the modes the endpoints use. */
function failureGuidance(endpoints: ReadonlyArray<{ onFailure: 'replay' | 'resume' }>): string {
  const replayed =
    'Successful responses and errors raised after execution began (5xx included) are replayed with Idempotent-Replayed: true';
  const resumed =
    'a failure answered with Idempotent-Resumable: true did not complete and may be retried with the same key and payload within the retention: the retry finishes the work without repeating the steps already done and answers the completed result. A failure without that header is final (a 4xx, or one the server declared final): it is replayed, so never retry it with the same key';
  const modes = new Set(endpoints.map((endpoint) => endpoint.onFailure));
  if (!modes.has('resume')) return `${replayed}.`;
  if (!modes.has('replay')) return `Successful responses are replayed with Idempotent-Replayed: true; ${resumed}.`;
  return `${replayed}, except on endpoints whose failures are resumed on retry (Stripe v2, see "On failure"): there ${resumed}.`;
}

/** Renders the policy as a small, readable HTML page. */
export function renderPolicyHtml(policy: PolicyDocument): string {
  const rows = policy.endpoints
    .map(
      (e) =>
        `<tr><td>${escapeHtml(e.endpoint)}</td><td>${escapeHtml(e.retention)}</td><td>${escapeHtml(e.lease)}</td><td>${escapeHtml(e.wait)}</td><td>${escapeHtml(e.keySources.join(', '))}${e.required ? ' (required)' : ' (optional)'}</td><td>${escapeHtml(e.expiredReuse === 'execute' ? 'executed as new, recorded' : 'refused (422)')}</td><td>${escapeHtml(e.onFailure === 'resume' ? 'resumed on retry (Stripe v2)' : 'replayed (Stripe v1)')}</td><td>${escapeHtml(e.stored)}</td><td>${escapeHtml(e.fingerprint)}</td></tr>`,
    )
    .join('\n');
  const statuses = policy.statuses
    .map(
      (s) =>
        `<tr id="${escapeHtml(s.code)}"><td>${s.status}</td><td><a href="#${escapeHtml(s.code)}"><code>${escapeHtml(s.code)}</code></a></td><td>${escapeHtml(s.meaning)}</td><td>${escapeHtml(s.clientAction)}</td></tr>`,
    )
    .join('\n');
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${escapeHtml(policy.title)}</title>
<style>body{font-family:system-ui,sans-serif;max-width:72rem;margin:2rem auto;padding:0 1rem;line-height:1.5}table{border-collapse:collapse;width:100%;margin:1rem 0}td,th{border:1px solid #ccc;padding:.4rem .6rem;text-align:left;vertical-align:top}th{background:#f4f4f4}code{font-size:.95em}</style>
</head><body>
<h1>${escapeHtml(policy.title)}</h1>
<p>Send an <code>Idempotency-Key</code> header (a quoted string, e.g. <code>Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"</code>) or the key argument where listed. Keys are scoped per account and endpoint.</p>
<p><strong>${escapeHtml(policy.clientGuidance)}</strong></p>
<h2>Endpoints</h2>
<table><thead><tr><th>Endpoint</th><th>Retention</th><th>Lease</th><th>A duplicate in progress waits</th><th>Key</th><th>Reuse after retention</th><th>On failure</th><th>Stored and replayed</th><th>Fingerprint</th></tr></thead><tbody>
${rows}
</tbody></table>
<h2>Statuses</h2>
<p>Each problem body's <code>type</code> is this page's URL with the code as fragment, e.g. <code>${escapeHtml(policy.statuses[0]?.type ?? '')}</code>: the row below.</p>
<table><thead><tr><th>Status</th><th>Code (problem type)</th><th>Meaning</th><th>What to do</th></tr></thead><tbody>
${statuses}
</tbody></table>
<p>Replays carry <code>Idempotent-Replayed: true</code>; a failure that a retry with the same key completes carries <code>Idempotent-Resumable: true</code>. Expired keys are archived, not deleted, so a reuse can be explained.</p>
</body></html>
`;
}
