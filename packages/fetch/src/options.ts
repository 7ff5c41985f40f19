import type { AdapterOptions } from '@idem/core/adapter';

/**
 * The options of `idempotent()` and of the Hono middleware: the options every idem adapter takes
 * (`@idem/core/adapter`'s `AdapterOptions`: `store`, `principal`, `required`, `key`, `fingerprint`,
 * `atomic` and the engine's `retention`, `lease`, `expiredReuse`, `onFailure`, `onEvent`, `documentationUrl`,
 * `conflictRetryAfter`, `unavailableRetryAfter`, `maxStoredBytes`), and the HTTP ones below.
 *
 * In HTTP words: an operation is a route, `POST /v1/payments` (what `required` lists and the
 * scope holds, S1); `key.field` is a top-level field of a JSON object body; the fingerprint reads a
 * {@link RequestFingerprintInput} (`fingerprint: { fields: ['json.amount'] }` picks from it).
 * `TContext` is what `principal` and `operation` get: the `Request` (`idempotent()`), Hono's
 * `Context` (`@idem/fetch/hono`).
 */
export interface HttpIdempotencyOptions<TContext, TTx = unknown> extends AdapterOptions<TContext, TTx> {
  /**
   * The methods whose requests are keyed; any other passes through untouched. GET, HEAD, OPTIONS
   * and TRACE are safe methods and always pass through (listing one is refused). Defaults to
   * `['POST', 'PATCH']`; add `'PUT'` or `'DELETE'` where a retry of those must not run twice.
   */
  methods?: readonly string[];
  /**
   * S1: the operation a request is for, which the scope holds (with the principal) and `required`
   * names. Defaults to the method and the path without the query string, with the
   * percent-encoding of unreserved characters decoded, `POST /orders/42` (`idempotent()`: the same
   * key on another path is another record), or the matched route template, `POST /orders/:id`
   * (Hono: the same key on another id of the route is a 422, F3).
   */
  operation?: (context: TContext) => string;
  /**
   * F1: request headers the fingerprint covers beside the method, the path, the body and its
   * media type, e.g. `['x-tenant', 'accept-language']` (case-insensitive). Defaults to none.
   */
  fingerprintHeaders?: readonly string[];
  /** F1: whether the fingerprint covers the query string. Defaults to `false` (the path only). */
  fingerprintQuery?: boolean;
  /**
   * E2: response headers stored and replayed beside those that describe the body and where it
   * lives: `Content-Type`, `Content-Encoding`, `Location`, `ETag`, `Content-Location`, `Link`.
   * `Set-Cookie`, `Content-Length` and hop-by-hop headers (`Connection`, `Transfer-Encoding`, …)
   * are never stored (naming one is refused): a replay must not hand one client's session to
   * another. Defaults to none beyond those six.
   */
  replayHeaders?: readonly string[];
  /**
   * The largest request body read, in bytes. A larger one (by `Content-Length`, or as it streams
   * in) is answered 413 before anything is claimed or run. Defaults to 1 MiB.
   */
  maxBodyBytes?: number;
}

/**
 * F1: what the fingerprint of a request reads: its method, its path (and query with
 * `fingerprintQuery`), the headers named in `fingerprintHeaders` (`null` when absent), the body's
 * media type, and the body as received — `json`, the parsed value of a JSON body (`application/json`
 * or `…+json`: object key order and white space make no difference, the `key.field` left out), or
 * else `bytes`, the bytes as they came. Exactly one of `json` and `bytes` is set, so no JSON body
 * can fingerprint as some other body's bytes.
 */
export interface RequestFingerprintInput {
  method: string;
  path: string;
  /** The query string (`?a=1`, `''` for none); only with `fingerprintQuery: true`. */
  query?: string;
  /** The named headers, lowercased; only with `fingerprintHeaders`. */
  headers?: Record<string, string | null>;
  /** The media type of the body, lowercased, without parameters (`application/json`); null without `Content-Type`. */
  contentType: string | null;
  /** The parsed JSON body. */
  json?: unknown;
  /** The body's bytes, when it is not JSON (or not valid JSON). */
  bytes?: Uint8Array;
}
