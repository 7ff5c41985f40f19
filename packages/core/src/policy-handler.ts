/**
 * The published policy (R4) as a fetch-standard handler, `(Request) => Response`: what a Next.js
 * App Router route exports as `GET`, what a Yoga plugin answers from `onRequest`, what Hono,
 * Workers, Bun and Deno serve as they are. Every problem body's `type` points at this URL.
 */
import { resolveDocumentationUrl } from './documentation-url.js';
import { DEFAULT_DOCUMENTATION_URL } from './errors.js';
import { createPolicyDocument, renderPolicyHtml, type PublishedEndpoint } from './policy.js';

export interface PolicyHandlerOptions {
  /** The idempotent endpoints, as the adapters run them (see {@link PublishedEndpoint} for the defaults). */
  endpoints: readonly PublishedEndpoint[];
  /**
   * Where the policy is published: the URL problem types point at, so the same value as the
   * adapters' `documentationUrl`. A relative one is resolved against each request's URL; behind a
   * proxy or gateway that changes the host or the path (and in Next.js, whose `request.url` may
   * name `localhost`), give the public absolute URL. Defaults to `/idempotency`.
   */
  documentationUrl?: string;
  /** The page's title. Defaults to `Idempotency policy`. */
  title?: string;
}

/** The Accept header's weight for a media type (`type/subtype`), by RFC 9110's most specific match. */
function weight(accept: string, type: string): number {
  const [major] = type.split('/');
  let best = { specificity: -1, q: 0 };
  for (const part of accept.split(',')) {
    const [range = '', ...parameters] = part.split(';').map((piece) => piece.trim().toLowerCase());
    const specificity = range === type ? 2 : range === `${major}/*` ? 1 : range === '*/*' ? 0 : -1;
    if (specificity <= best.specificity) continue;
    const q = parameters.find((parameter) => parameter.startsWith('q='));
    const value = q === undefined ? 1 : Number(q.slice(2));
    best = { specificity, q: Number.isFinite(value) ? value : 0 };
  }
  return best.q;
}

/** Whether a request with this Accept header prefers JSON to HTML (HTML on a tie, and without one). */
export function prefersJson(accept: string | null | undefined): boolean {
  if (!accept) return false;
  return weight(accept, 'application/json') > weight(accept, 'text/html');
}

/**
 * A handler that answers `GET` (and `HEAD`) with the policy document: JSON when the request's
 * `Accept` prefers `application/json` (as `idempotencyLink` and `idem policy --url` send it), the
 * HTML page with an anchor per problem code otherwise; `Vary: Accept` either way. Other methods
 * get 405 with `Allow: GET, HEAD`.
 */
export function createPolicyHandler({
  endpoints,
  documentationUrl = DEFAULT_DOCUMENTATION_URL,
  title,
}: PolicyHandlerOptions): (request: Request) => Response {
  return (request) => {
    if (request.method !== 'GET' && request.method !== 'HEAD')
      return new Response(null, { status: 405, headers: { allow: 'GET, HEAD' } });
    const policy = createPolicyDocument({
      documentationUrl: resolveDocumentationUrl(documentationUrl, request.url),
      endpoints,
      ...(title !== undefined && { title }),
    });
    const json = prefersJson(request.headers.get('accept'));
    const body = json ? JSON.stringify(policy) : renderPolicyHtml(policy);
    return new Response(request.method === 'HEAD' ? null : body, {
      status: 200,
      headers: {
        'content-type': json ? 'application/json' : 'text/html; charset=utf-8',
        vary: 'Accept',
      },
    });
  };
}
