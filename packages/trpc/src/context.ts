import type { TRPCRequestInfo } from '@trpc/server/http';
import { requestUrlOf } from '@idem/core/http';

/** Where the transport lives in the tRPC context. A symbol, so it never collides with your own fields. */
export const IDEMPOTENCY_TRANSPORT: unique symbol = Symbol.for('@idem/trpc/transport');

/**
 * What the middleware needs from the HTTP request and response, read from the adapter's
 * `createContext` options by {@link idempotencyContext}.
 */
export interface IdempotencyTransport {
  /** The request header's value(s), `undefined` when absent. Name is case-insensitive. */
  requestHeader(name: string): string | readonly string[] | undefined;
  /**
   * Sets a response header. Never throws: once the response has started (`httpBatchStreamLink`),
   * the header is silently dropped.
   */
  setResponseHeader(name: string, value: string): void;
  /** The response header as set so far in this request, for merging values across batch calls. */
  responseHeader(name: string): string | undefined;
  /** tRPC's description of the request (batch, calls); undefined outside the HTTP adapters. */
  info: TRPCRequestInfo | undefined;
  /** The request's absolute URL, against which a relative `documentationUrl` is resolved (problem types); undefined when unknown. */
  requestUrl?(): string | undefined;
}

/** The fields {@link idempotencyContext} adds to your context. */
export interface IdempotencyContext {
  readonly [IDEMPOTENCY_TRANSPORT]: IdempotencyTransport;
}

/** A Node.js request (standalone, Express, Next.js pages adapters). */
interface NodeRequestLike {
  headers: Record<string, string | string[] | undefined>;
  /** Node ≥ 18.3: every header as an array, duplicates kept apart. */
  headersDistinct?: Record<string, string[] | undefined>;
}

/** A Node.js response. */
interface NodeResponseLike {
  setHeader(name: string, value: string): unknown;
  getHeader(name: string): unknown;
  readonly headersSent: boolean;
}

/** A Fetch API request (fetch adapter: Next.js app dir, Workers, Deno, Bun...). */
interface FetchRequestLike {
  headers: Headers;
}

/**
 * The `createContext` options of the tRPC HTTP adapters this helper understands:
 * standalone and Express (`{ req, res, info }`), fetch (`{ req, resHeaders, info }`).
 */
export interface IdempotencyContextOptions {
  /** The request: a Node.js `IncomingMessage` (standalone, Express) or a Fetch API `Request`. Required. */
  req: NodeRequestLike | FetchRequestLike;
  /** Node.js adapters: the response, for `Idempotent-Replayed` and `Retry-After`. Defaults to none (no headers set). */
  res?: NodeResponseLike;
  /** Fetch adapter: the response headers tRPC copies into its `Response`. Preferred over `res` when both are given. */
  resHeaders?: Headers;
  /** tRPC's request description, for the batch rule. Defaults to none: the request counts as one call. */
  info?: TRPCRequestInfo;
}

/**
 * Gives the idempotency middleware the request headers, the response headers and the batch
 * description. Spread it into what `createContext` returns:
 *
 * ```ts
 * createHTTPServer({ router, createContext: (opts) => ({ user: auth(opts.req), ...idempotencyContext(opts) }) });
 * fetchRequestHandler({ ..., createContext: (opts) => ({ ...idempotencyContext(opts) }) });
 * ```
 *
 * Response headers go through `res.setHeader` (standalone, Express; skipped once headers were
 * sent) or `resHeaders` (fetch).
 */
export function idempotencyContext(options: IdempotencyContextOptions): IdempotencyContext {
  return { [IDEMPOTENCY_TRANSPORT]: createTransport(options) };
}

function createTransport({ req, res, resHeaders, info }: IdempotencyContextOptions): IdempotencyTransport {
  const requestUrl = () => requestUrlOf(req);
  const requestHeader = isFetchRequest(req)
    ? (name: string) => req.headers.get(name) ?? undefined
    : (name: string) => {
        const lower = name.toLowerCase();
        return req.headersDistinct?.[lower] ?? req.headers[lower];
      };

  if (resHeaders) {
    return {
      requestHeader,
      setResponseHeader: (name, value) => resHeaders.set(name, value),
      responseHeader: (name) => resHeaders.get(name) ?? undefined,
      info,
      requestUrl,
    };
  }
  if (res) {
    return {
      requestHeader,
      setResponseHeader(name, value) {
        if (res.headersSent) return;
        try {
          res.setHeader(name, value);
        } catch {
          // The response started between the check and the call: a streamed response (E2 caveat).
        }
      },
      responseHeader(name) {
        const value = res.getHeader(name);
        return value === undefined ? undefined : String(value);
      },
      info,
      requestUrl,
    };
  }
  return { requestHeader, setResponseHeader: () => {}, responseHeader: () => undefined, info, requestUrl };
}

function isFetchRequest(req: NodeRequestLike | FetchRequestLike): req is FetchRequestLike {
  return typeof Headers !== 'undefined' && req.headers instanceof Headers;
}

/** The transport the context carries, if `idempotencyContext` was spread into it. */
export function getTransport(ctx: unknown): IdempotencyTransport | undefined {
  if (ctx === null || typeof ctx !== 'object') return undefined;
  return (ctx as Partial<IdempotencyContext>)[IDEMPOTENCY_TRANSPORT];
}
