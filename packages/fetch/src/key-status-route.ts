/**
 * `GET …/<key>?operation=POST /api/orders`: what became of one of the caller's keys on a plain
 * HTTP route (R2, A1, S1), as a Fetch-standard handler: the route a client past the retention asks
 * instead of sending the payment again. The answer is the document the tRPC procedure and the
 * GraphQL field give (`@idem/core`'s key status lookup).
 */
import {
  createKeyStatusLookup,
  KeyStatusQueryError,
  parseKeyStatusQuery,
  SharedPrincipalLookupError,
  type KeyStatusDocument,
  type KeyStatusLookupOptions,
  type KeyStatusQuery,
} from '@idem/core/key-status';
import { isIdempotencyError } from '@idem/core';
import { resolveDocumentationUrl } from '@idem/core/http';

/**
 * The options of {@link keyStatusRoute}: the `store` and `principal` of the `idempotent()` routes
 * it answers for (pass the same object), and the lookup's own (`clockToleranceMs`, …).
 */
export interface KeyStatusRouteOptions<TRequest extends Request = Request>
  extends Omit<KeyStatusLookupOptions<TRequest>, 'serializer'> {
  /** Where problem bodies' `type` points, as on `idempotent()`. Defaults to `/idempotency`. */
  documentationUrl?: string;
}

/**
 * A `(Request) => Response` handler that answers what became of one of the caller's keys on an
 * `idempotent()` route: mount it as a GET route (Next.js: `export const GET = keyStatusRoute(options)`
 * in `src/app/api/idempotency/keys/[key]/route.ts`).
 *
 * - The key is the last path segment, percent-decoded (or the `key` query parameter);
 *   `operation` names the route it was used on: its method and path, `POST /api/orders`
 *   (`requestOperation`, the adapter's default operation).
 * - 200 `application/json`: every generation of the key under the caller's principal, and the
 *   stored response (`{ status, headers, body }`) while it is replayable;
 * - 404: the caller has no record of this key (unknown, or another principal's: one answer for
 *   both, S1); 400: a malformed key (K1–K3) or operation; 403: a caller whose principal is a
 *   shared one (`sharedPrincipals`, by default `'*'`); 405: a method other than GET or HEAD.
 *
 * Every answer is `Cache-Control: no-store`: a stored outcome may be personal.
 * @throws TypeError `[idem] …` when `store` or `principal` is missing.
 */
export function keyStatusRoute<TRequest extends Request = Request>(
  options: KeyStatusRouteOptions<TRequest>,
): (request: TRequest) => Promise<Response> {
  const { documentationUrl = '/idempotency', ...lookupOptions } = options;
  const lookUp = createKeyStatusLookup<TRequest>(lookupOptions);
  return async (request) => {
    const method = request.method.toUpperCase();
    if (method !== 'GET' && method !== 'HEAD')
      return problem(405, 'Method Not Allowed', `${request.method} is not allowed here; GET the key's status.`, {
        allow: 'GET, HEAD',
      });
    const url = new URL(request.url);
    let query: KeyStatusQuery;
    try {
      query = parseKeyStatusQuery({
        key: url.searchParams.get('key') ?? lastSegment(url.pathname),
        operation: url.searchParams.get('operation') ?? undefined,
      });
    } catch (error) {
      if (isIdempotencyError(error))
        return json(
          error.status,
          error.toProblem(resolveDocumentationUrl(documentationUrl, request.url)),
          'application/problem+json',
        );
      if (error instanceof KeyStatusQueryError) return problem(400, 'Bad Request', error.message);
      throw error;
    }
    let status: KeyStatusDocument | null;
    try {
      status = await lookUp(request, query);
    } catch (error) {
      if (!(error instanceof SharedPrincipalLookupError)) throw error;
      return json(
        403,
        error.toProblem(resolveDocumentationUrl(documentationUrl, request.url)),
        'application/problem+json',
      );
    }
    if (!status)
      return problem(
        404,
        'Not Found',
        'There is no record of this key on this operation for you: it was never used here, or belongs to someone else.',
      );
    return json(200, status, 'application/json');
  };
}

/** The last path segment, percent-decoded; `''` when there is none. */
function lastSegment(pathname: string): string {
  const segment = pathname.slice(pathname.lastIndexOf('/') + 1);
  try {
    return decodeURIComponent(segment);
  } catch {
    // Not percent-encoding: refused as a key whose characters are not allowed (K3).
    return '\u0000';
  }
}

function problem(status: number, title: string, detail: string, headers: Record<string, string> = {}): Response {
  return json(status, { type: 'about:blank', title, status, detail }, 'application/problem+json', headers);
}

function json(status: number, body: unknown, type: string, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: { 'content-type': type, 'cache-control': 'no-store', ...headers },
  });
}
