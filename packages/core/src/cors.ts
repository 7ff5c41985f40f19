/**
 * CORS for idempotent endpoints: a browser on another origin must be allowed to send
 * `Idempotency-Key` (a preflighted header) and can read `Idempotent-Replayed`, `Idempotent-Resumable`
 * and `Retry-After` only when the server exposes them. {@link idempotencyCors} builds one configuration that GraphQL
 * Yoga's `cors` option and the `cors` package (tRPC's standalone and Express adapters) both take
 * as it is; {@link idempotencyCorsHeaders} answers a Fetch API request with it (the
 * tRPC fetch adapter: Next.js route handlers, Workers, Deno, Bun), which has no CORS of its own.
 */
import { IDEMPOTENCY_KEY_HEADER, IDEMPOTENT_REPLAYED_HEADER, IDEMPOTENT_RESUMABLE_HEADER } from './key.js';

/** Request headers a browser must be allowed to send: the key, and what a JSON call with credentials sends beside it. */
export const IDEMPOTENCY_CORS_ALLOWED_HEADERS: readonly string[] = [
  IDEMPOTENCY_KEY_HEADER,
  'Content-Type',
  'Authorization',
];

/**
 * Response headers a browser script can read only when they are exposed: a replay (E2), a failure
 * that left its key resumable (E8), and the wait on 409/503 (E3, E5).
 */
export const IDEMPOTENCY_CORS_EXPOSED_HEADERS: readonly string[] = [
  IDEMPOTENT_REPLAYED_HEADER,
  IDEMPOTENT_RESUMABLE_HEADER,
  'Retry-After',
];

/** Options of {@link idempotencyCors}. */
export interface IdempotencyCorsOptions {
  /**
   * The origins allowed to call the API (`'https://shop.example.com'`, scheme, host and port,
   * no path), or `'*'` for any origin (then without credentials). Required: which sites may
   * spend your users' keys is yours to choose.
   */
  origin: string | readonly string[];
  /**
   * More request headers to allow beside {@link IDEMPOTENCY_CORS_ALLOWED_HEADERS}: tRPC's
   * `httpBatchStreamLink` sends `trpc-accept`, create-t3-app's client `x-trpc-source`. Defaults to none.
   */
  allowedHeaders?: readonly string[];
  /** More response headers to expose beside {@link IDEMPOTENCY_CORS_EXPOSED_HEADERS}. Defaults to none. */
  exposedHeaders?: readonly string[];
  /** The methods allowed. Defaults to `['GET', 'POST']` (tRPC and GraphQL over HTTP). */
  methods?: readonly string[];
  /** Whether the browser may send cookies (`fetch(…, { credentials: 'include' })`). Defaults to false. */
  credentials?: boolean;
  /** How long, in seconds, a browser may cache a preflight answer. Defaults to 600. */
  maxAge?: number;
}

/** The `cors` package's options (expressjs/cors), as {@link IdempotencyCorsConfiguration} hands them over. */
export interface CorsPackageOptions {
  origin: string | string[];
  methods: string[];
  allowedHeaders: string[];
  exposedHeaders: string[];
  credentials: boolean;
  maxAge: number;
}

/** What GraphQL Yoga's CORS gets for one request: the options to answer it with, or `false` for no CORS headers. */
export type YogaCorsDecision =
  | {
      origin: string;
      methods: string[];
      allowedHeaders: string[];
      exposedHeaders: string[];
      credentials: boolean;
      maxAge: number;
    }
  | false;

/**
 * A CORS configuration with idem's headers in it, passed as it is to GraphQL Yoga's `cors`, to the
 * `cors` package (expressjs/cors) or to {@link idempotencyCorsHeaders}. It is a function, because
 * neither host may be handed a list of origins as such: Yoga answers an origin missing from a list
 * of two or more with `Access-Control-Allow-Origin: null`, which is exactly the origin of a
 * sandboxed iframe or a `data:` page, so any site could then read the answers (and, with
 * `credentials`, send cookies). Called by Yoga, `(request)`, it decides per request: the options
 * for an allowed origin, which Yoga answers with that origin; `false` for any other (no CORS
 * headers, the browser blocks). Called by the `cors` package as its options delegate,
 * `(req, callback)`, it hands over the options with the list, which that package matches itself.
 * Its fields are the configuration, for reading.
 */
export interface IdempotencyCorsConfiguration {
  /** GraphQL Yoga's `cors` option: this request's CORS options, or `false` for none. */
  (request: CorsRequestLike, serverContext?: unknown): YogaCorsDecision;
  /** The `cors` package's options delegate: `callback(null, options)`. */
  (request: unknown, callback: (error: Error | null, options: CorsPackageOptions) => void): void;
  /** `'*'`, or the allowed origins. */
  readonly origin: string | string[];
  readonly methods: string[];
  readonly allowedHeaders: string[];
  readonly exposedHeaders: string[];
  readonly credentials: boolean;
  readonly maxAge: number;
}

/**
 * The CORS configuration of an idempotent API: `Idempotency-Key`, `Content-Type` and
 * `Authorization` allowed in preflight, `Idempotent-Replayed`, `Idempotent-Resumable` and `Retry-After` exposed, plus
 * your own. Pass it to GraphQL Yoga (`createYoga({ cors: idempotencyCors({ origin }) })`), to
 * the `cors` package (`createHTTPServer({ middleware: cors(idempotencyCors({ origin })) })`), or
 * to {@link idempotencyCorsHeaders} in a Fetch API handler. An origin that is not allowed gets no
 * `Access-Control-Allow-Origin` from any of them (never the literal `null`, see
 * {@link IdempotencyCorsConfiguration}).
 *
 * @throws TypeError `[idem] …` for an origin that is not one (a path, no scheme, `null`), no
 * origin at all, `'*'` beside other origins, or `'*'` with credentials (browsers refuse it).
 */
export function idempotencyCors({
  origin,
  allowedHeaders = [],
  exposedHeaders = [],
  methods = ['GET', 'POST'],
  credentials = false,
  maxAge = 600,
}: IdempotencyCorsOptions): IdempotencyCorsConfiguration {
  const origins = typeof origin === 'string' ? [origin] : [...origin];
  if (origins.length === 0)
    throw new TypeError('[idem] idempotencyCors: origin must name at least one origin, e.g. https://shop.example.com');
  if (origins.includes('*')) {
    if (origins.length > 1)
      throw new TypeError("[idem] idempotencyCors: '*' allows every origin; list origins or pass '*' alone");
    if (credentials)
      throw new TypeError(
        "[idem] idempotencyCors: browsers refuse credentials with origin '*'; list the origins instead",
      );
  } else {
    for (const each of origins) assertOrigin(each);
  }
  if (!Number.isInteger(maxAge) || maxAge < 0)
    throw new TypeError(`[idem] idempotencyCors: maxAge must be a whole number of seconds, got ${String(maxAge)}`);
  const any = origins.includes('*');
  const fields = {
    origin: any ? '*' : origins,
    methods: [...methods],
    allowedHeaders: unique([...IDEMPOTENCY_CORS_ALLOWED_HEADERS, ...allowedHeaders]),
    exposedHeaders: unique([...IDEMPOTENCY_CORS_EXPOSED_HEADERS, ...exposedHeaders]),
    credentials,
    maxAge,
  };
  const options = () => ({
    methods: [...fields.methods],
    allowedHeaders: [...fields.allowedHeaders],
    exposedHeaders: [...fields.exposedHeaders],
    credentials,
    maxAge,
  });
  function configuration(request: unknown, second?: unknown): YogaCorsDecision | undefined {
    if (typeof second === 'function') {
      (second as (error: null, options: CorsPackageOptions) => void)(null, {
        origin: any ? '*' : [...origins],
        ...options(),
      });
      return undefined;
    }
    const requestOrigin = (request as CorsRequestLike).headers.get('origin');
    // One origin per answer, the request's own, and only when it is allowed.
    if (requestOrigin === null || (!any && !origins.includes(requestOrigin))) return false;
    return { origin: any ? '*' : requestOrigin, ...options() };
  }
  return Object.assign(configuration, fields) as unknown as IdempotencyCorsConfiguration;
}

/** A Fetch API request, or anything with its method and headers. */
export interface CorsRequestLike {
  method: string;
  headers: { get(name: string): string | null };
}

/**
 * The CORS response headers for `request` under `configuration` (from {@link idempotencyCors}):
 * for a preflight (`OPTIONS` with `Access-Control-Request-Method`) the allowed methods, headers
 * and max age; for any other request from an allowed origin the exposed headers. A request from
 * an origin that is not allowed gets no `Access-Control-Allow-Origin`, so the browser blocks it;
 * a request without `Origin` (not from a browser, or same-origin) gets nothing. `Vary: Origin`
 * is set whenever the answer depends on the origin.
 *
 * ```ts
 * // app/api/trpc/[trpc]/route.ts
 * export const OPTIONS = (req: Request) => new Response(null, { status: 204, headers: idempotencyCorsHeaders(req, cors) });
 * ```
 */
export function idempotencyCorsHeaders(
  request: CorsRequestLike,
  configuration: IdempotencyCorsConfiguration,
): Record<string, string> {
  const origin = request.headers.get('origin');
  if (origin === null) return {};
  const any = configuration.origin === '*';
  const headers: Record<string, string> = any ? {} : { Vary: 'Origin' };
  // A list miss gets no Access-Control-Allow-Origin at all: `null` would match sandboxed pages.
  if (!any && !configuration.origin.includes(origin)) return headers;
  headers['Access-Control-Allow-Origin'] = any ? '*' : origin;
  if (configuration.credentials) headers['Access-Control-Allow-Credentials'] = 'true';
  if (request.method.toUpperCase() === 'OPTIONS' && request.headers.get('access-control-request-method') !== null) {
    headers['Access-Control-Allow-Methods'] = configuration.methods.join(', ');
    headers['Access-Control-Allow-Headers'] = configuration.allowedHeaders.join(', ');
    headers['Access-Control-Max-Age'] = String(configuration.maxAge);
  } else {
    headers['Access-Control-Expose-Headers'] = configuration.exposedHeaders.join(', ');
  }
  return headers;
}

function assertOrigin(value: string): void {
  let parsed: URL | undefined;
  try {
    parsed = new URL(value);
  } catch {
    parsed = undefined;
  }
  if (!parsed || parsed.origin === 'null' || parsed.origin !== value) {
    throw new TypeError(
      `[idem] idempotencyCors: ${JSON.stringify(value)} is not an origin; write scheme, host and port only, e.g. https://shop.example.com or http://localhost:3001`,
    );
  }
}

function unique(names: string[]): string[] {
  const seen = new Set<string>();
  return names.filter((name) => {
    const lower = name.toLowerCase();
    if (seen.has(lower)) return false;
    seen.add(lower);
    return true;
  });
}
