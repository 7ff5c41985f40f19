/**
 * CSRF prevention for mutations (GraphQL Yoga): a browser sends a `POST` whose `Content-Type` is
 * `application/x-www-form-urlencoded`, `multipart/form-data` or `text/plain` from any site, as a
 * plain HTML form, without asking the server first (no CORS preflight), and with the user's
 * cookies. CORS then only hides the answer: the mutation has run. Yoga parses the first two, so
 * a cookie-authenticated mutation could be sent by any page the user visits. A mutation in such a
 * request is refused unless it carries a header a form cannot set (one of `requestHeaders`): a
 * page can set one only through `fetch`, which then asks the server first.
 */
import { GraphQLError } from 'graphql';
import { IDEMPOTENCY_KEY_HEADER } from '@idem/core';

/** Fetch's CORS-safelisted `Content-Type` values: requests with them are sent without a preflight. */
const SIMPLE_CONTENT_TYPES = ['application/x-www-form-urlencoded', 'multipart/form-data', 'text/plain'];

/**
 * Headers that prove a preflight: `Idempotency-Key` (idem's own), `X-GraphQL-Yoga-CSRF` (Yoga's
 * CSRF plugin) and `Apollo-Require-Preflight` (Apollo clients, `apollo-upload-client`).
 */
export const DEFAULT_PREFLIGHT_HEADERS: readonly string[] = [
  IDEMPOTENCY_KEY_HEADER,
  'X-GraphQL-Yoga-CSRF',
  'Apollo-Require-Preflight',
];

/** The `csrfPrevention` option of `useYogaIdempotency`. */
export interface CsrfPreventionOptions {
  /** Headers any one of which lets a mutation through in a form-like request. Defaults to {@link DEFAULT_PREFLIGHT_HEADERS}. */
  requestHeaders?: readonly string[];
}

/** Whether `request` is one a browser sends cross-site without a preflight, and carries none of `requestHeaders`. */
export function isUnpreflightedRequest(
  request: { method: string; headers: { get(name: string): string | null } },
  requestHeaders: readonly string[],
): boolean {
  if (request.method.toUpperCase() !== 'POST') return false;
  const mediaType = (request.headers.get('content-type') ?? '').split(';')[0]!.trim().toLowerCase();
  if (!SIMPLE_CONTENT_TYPES.includes(mediaType)) return false;
  return !requestHeaders.some((name) => request.headers.get(name) !== null);
}

/** The 415 a mutation in such a request gets; nothing was executed. */
export function unpreflightedMutationError(requestHeaders: readonly string[]): GraphQLError {
  return new GraphQLError(
    `[idem] A mutation sent as a form (application/x-www-form-urlencoded, multipart/form-data or text/plain) is refused unless it carries one of these headers: ${requestHeaders.join(', ')}. Any web page can send such a request with the user's cookies and without the server's consent (cross-site request forgery); nothing was executed. Send the mutation as application/json, or add one of those headers.`,
    { extensions: { code: 'MUTATION_REQUIRES_PREFLIGHT', http: { status: 415 } } },
  );
}
