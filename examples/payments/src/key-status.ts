/**
 * `GET /idempotency/keys/{key}?operation=<tRPC path or Mutation.field>` (or
 * `GET /idempotency/keys?key=<key>&operation=…`, which also reaches the keys `.` and `..` that a
 * URL path cannot carry): what became of one of
 * the caller's keys, in plain HTTP, with the caller's usual `Authorization` (R2, A1, S1). A
 * client past the retention asks this instead of sending the payment again.
 *
 * - 200 `application/json`: every generation of the key under the caller's account (state, first
 *   seen, completed, expired or archived, the outcome status, and the stored outcome while it is
 *   replayable), the same document as the tRPC procedure `idempotency.status` and the GraphQL
 *   field `idempotencyKeyStatus`;
 * - 404: the caller has no record of this key: unknown, or another account's (one answer for both);
 * - 400: a malformed key (K1–K3) or no `operation`; 401: credentials that are not `Bearer <account>`;
 * - 403 `SharedPrincipalLookupError`: the shared anonymous account (no `Authorization`: `public`),
 *   whose keys anyone could read by key alone.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import {
  createKeyStatusLookup,
  KeyStatusQueryError,
  parseKeyStatusQuery,
  SharedPrincipalLookupError,
  type KeyStatusDocument,
  type KeyStatusQuery,
} from '@idem/core/key-status';
import { isIdempotencyError, type IdempotencyStore } from '@idem/core';
import { requestUrlOf, resolveDocumentationUrl } from '@idem/core/http';
import { createGraphQLKeyStatusLookup } from '@idem/envelop';
import { accountOf, BadCredentialsError, SHARED_ACCOUNTS } from './account.ts';

/** Where the route lives: the key follows, percent-encoded as a path segment. */
export const KEY_STATUS_PATH = '/idempotency/keys/';

/** The query form of the route: `?key=…&operation=…`. */
export const KEY_STATUS_QUERY_PATH = '/idempotency/keys';

/**
 * The route over the example's one store. The account is the one both endpoints read (S1):
 * `Bearer <account>`, or `public` without an Authorization header.
 */
export function createKeyStatusRoute({
  store,
  documentationPath,
}: {
  store: IdempotencyStore;
  documentationPath: string;
}) {
  const principal = (account: string) => account;
  const sharedPrincipals = SHARED_ACCOUNTS;
  // The tRPC endpoint stores JSON; the GraphQL lookup also reads header-key units.
  const trpcLookup = createKeyStatusLookup({ store, principal, sharedPrincipals });
  const graphqlLookup = createGraphQLKeyStatusLookup({ store, principal, sharedPrincipals });
  const lookUp = (account: string, query: KeyStatusQuery): Promise<KeyStatusDocument | null> =>
    /^(Mutation\.|mutation:)/.test(query.operation) ? graphqlLookup(account, query) : trpcLookup(account, query);

  return async (req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> => {
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.setHeader('Allow', 'GET, HEAD');
      return problem(res, 405, 'Method Not Allowed', `${req.method} is not allowed here; GET the key's status.`);
    }
    let account: string;
    try {
      account = accountOf(req.headers.authorization);
    } catch (error) {
      if (!(error instanceof BadCredentialsError)) throw error;
      res.setHeader('WWW-Authenticate', 'Bearer realm="payments"');
      return problem(res, 401, 'Unauthorized', error.message);
    }
    let query: KeyStatusQuery;
    try {
      query = parseKeyStatusQuery({
        key: url.pathname === KEY_STATUS_QUERY_PATH ? (url.searchParams.get('key') ?? undefined) : keyOf(url.pathname),
        operation: url.searchParams.get('operation') ?? undefined,
      });
    } catch (error) {
      if (isIdempotencyError(error)) {
        const documentationUrl = resolveDocumentationUrl(documentationPath, requestUrlOf(req));
        return send(res, error.status, 'application/problem+json', JSON.stringify(error.toProblem(documentationUrl)));
      }
      if (error instanceof KeyStatusQueryError) return problem(res, 400, 'Bad Request', error.message);
      throw error;
    }
    let status: KeyStatusDocument | null;
    try {
      status = await lookUp(account, query);
    } catch (error) {
      if (!(error instanceof SharedPrincipalLookupError)) throw error;
      const documentationUrl = resolveDocumentationUrl(documentationPath, requestUrlOf(req));
      return send(res, error.status, 'application/problem+json', JSON.stringify(error.toProblem(documentationUrl)));
    }
    if (!status)
      return problem(
        res,
        404,
        'Not Found',
        'This account has no record of this key on this operation: it was never used here, or belongs to someone else.',
      );
    send(res, 200, 'application/json', JSON.stringify(status));
  };
}

/** The key's path segment, percent-decoded; `''` when there is none. */
function keyOf(pathname: string): string {
  const segment = pathname.slice(KEY_STATUS_PATH.length);
  try {
    return decodeURIComponent(segment);
  } catch {
    // Not percent-encoding: refused as a key whose characters are not allowed (K3).
    return '\u0000';
  }
}

function problem(res: ServerResponse, status: number, title: string, detail: string): void {
  send(res, status, 'application/problem+json', JSON.stringify({ type: 'about:blank', title, status, detail }));
}

function send(res: ServerResponse, status: number, type: string, body: string): void {
  // A stored outcome may be personal: never kept by a cache on the way.
  res.writeHead(status, {
    'content-type': type,
    'content-length': Buffer.byteLength(body),
    'cache-control': 'no-store',
  });
  res.end(res.req.method === 'HEAD' ? undefined : body);
}
