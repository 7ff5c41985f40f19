/**
 * CORS for idempotent endpoints: a browser on another origin must be allowed to send
 * `Idempotency-Key` (a preflighted header) and can read `Idempotent-Replayed` and `Retry-After`
 * only when the server exposes them. {@link idempotencyCors} builds one configuration in the
 * shape GraphQL Yoga's `cors` option and the `cors` package (tRPC's standalone and Express
 * adapters) both take; {@link idempotencyCorsHeaders} answers a Fetch API request with it (the
 * tRPC fetch adapter: Next.js route handlers, Workers, Deno, Bun), which has no CORS of its own.
 */
import { IDEMPOTENCY_KEY_HEADER, IDEMPOTENT_REPLAYED_HEADER } from './key.js';

/** Request headers a browser must be allowed to send: the key, and what a JSON call with credentials sends beside it. */
export const IDEMPOTENCY_CORS_ALLOWED_HEADERS: readonly string[] = [
  IDEMPOTENCY_KEY_HEADER,
  'Content-Type',
  'Authorization',
];

/** Response headers a browser script can read only when they are exposed: a replay (E2), and the wait on 409/503 (E3, E5). */
export const IDEMPOTENCY_CORS_EXPOSED_HEADERS: readonly string[] = [IDEMPOTENT_REPLAYED_HEADER, 'Retry-After'];

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

/**
 * A CORS configuration with idem's headers in it. Its fields are the options of GraphQL Yoga's
 * `cors` and of the `cors` package (expressjs/cors), so it is passed to either as it is.
 */
export interface IdempotencyCorsConfiguration {
  /** `'*'`, or the allowed origins. */
  origin: string | string[];
  methods: string[];
  allowedHeaders: string[];
  exposedHeaders: string[];
  credentials: boolean;
  maxAge: number;
}

/**
 * The CORS configuration of an idempotent API: `Idempotency-Key`, `Content-Type` and
 * `Authorization` allowed in preflight, `Idempotent-Replayed` and `Retry-After` exposed, plus
 * your own. Pass it to GraphQL Yoga (`createYoga({ cors: idempotencyCors({ origin }) })`), to
 * the `cors` package (`createHTTPServer({ middleware: cors(idempotencyCors({ origin })) })`), or
 * to {@link idempotencyCorsHeaders} in a Fetch API handler.
 *
 * @throws TypeError `[idem] …` for an origin that is not one (a path, no scheme), no origin at
 * all, `'*'` beside other origins, or `'*'` with credentials (browsers refuse it).
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
  return {
    origin: origins.includes('*') ? '*' : origins,
    methods: [...methods],
    allowedHeaders: unique([...IDEMPOTENCY_CORS_ALLOWED_HEADERS, ...allowedHeaders]),
    exposedHeaders: unique([...IDEMPOTENCY_CORS_EXPOSED_HEADERS, ...exposedHeaders]),
    credentials,
    maxAge,
  };
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
