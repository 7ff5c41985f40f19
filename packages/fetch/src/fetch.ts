import { attachClaim } from '@idem/core/adapter';
import {
  idempotencyClaim,
  type ClaimCarrier,
  type ClaimContext,
  type EndpointPolicyDescription,
  type IdempotencyEngine,
} from '@idem/core';
import type { HttpIdempotencyOptions } from './options.js';
import { createHttpPipeline } from './pipeline.js';
import { readRequestBody } from './request-body.js';
import { normalizedPath } from './normalized-path.js';

/** The options of {@link idempotent}: `principal` and `operation` read the request. */
export type IdempotentOptions<TRequest extends Request = Request, TTx = unknown> = HttpIdempotencyOptions<
  TRequest,
  TTx
>;

/**
 * What {@link idempotent} returns: the handler, idempotent, with the same parameters. `claim(request)`
 * is the claim a request runs under, typed with the store's transaction (`claim(request)?.tx` in
 * atomic mode; `idempotencyClaim(request)` is the same, untyped). `engine` is the engine it runs on
 * (`engine.drain()` on shutdown waits for outcome writes being retried, E7).
 */
export interface IdempotentHandler<TRequest extends Request, TArgs extends unknown[], TTx = unknown> {
  (request: TRequest, ...args: TArgs): Promise<Response>;
  claim(request: Request): ClaimContext<TTx> | undefined;
  readonly engine: IdempotencyEngine<TTx>;
  /**
   * R4: the route as the published policy lists it — its key sources, `required`, retention,
   * lease, wait, reuse rule and `onFailure` — under `operation`, the method and path it answers
   * (`'POST /v1/payments'`): `createPolicyDocument({ documentationUrl, endpoints: [POST.describeEndpoint('POST /v1/payments')] })`.
   */
  describeEndpoint(operation: string): EndpointPolicyDescription;
}

/**
 * The default operation (S1): the method and the path, without the query string, normalised
 * (`normalizedPath`: `/orders/%31` is `/orders/1`, as the router that matches it sees it).
 */
export const requestOperation = (request: Request): string =>
  `${request.method} ${normalizedPath(new URL(request.url).pathname)}`;

/**
 * Makes a Fetch-standard handler idempotent — a Next.js route handler, a Bun or Deno server, a
 * Cloudflare Worker: `(request, ...rest) => Response`. The first request with a key runs the
 * handler and its response is stored (status, body bytes, the allowed headers; E4); a retry with
 * the same key and the same request gets that response again, byte for byte, with
 * `Idempotent-Replayed: true`, and the handler does not run (E2). A concurrent duplicate gets
 * 409 with `Retry-After` (E3), the same key with another request 422 (F3), a bad or missing key
 * 400, an unreachable store 503 (E5): problem+json (RFC 9457). GET, HEAD and OPTIONS pass through.
 *
 * ```ts
 * export const POST = idempotent(async (request) => Response.json(await createOrder(await request.json()), { status: 201 }), {
 *   store,
 *   principal: (request) => userIdOf(request),
 * });
 * ```
 *
 * The handler finds its claim on the request: `idempotencyClaim(request)?.deriveKey('psp')` for a
 * downstream key, `.tx` in atomic mode. A handler that throws has the error stored (E4) and
 * rethrown, now and on every replay, for the host to answer; `notStarted(response)` answers a
 * refusal made before the work started without storing it.
 *
 * With `onFailure: 'resume'` (E8, Stripe v2), a 5xx response is not replayed: it is answered with
 * `Idempotent-Resumable: true`, and a retry with the same key and request runs the handler again,
 * `claim.step(name, run)` skipping the steps it completed; its answer is then stored and replayed.
 * A 4xx, or a response returned as `finalFailure(response)`, is stored and replayed. A handler that
 * throws leaves the key resumable too, but its host answers the error, without the mark: return a
 * 5xx response where clients should know that a retry completes the work.
 */
export function idempotent<TRequest extends Request, TArgs extends unknown[], TTx = unknown>(
  handler: (request: TRequest, ...args: TArgs) => Response | Promise<Response>,
  options: IdempotentOptions<TRequest, TTx>,
): IdempotentHandler<TRequest, TArgs, TTx> {
  const pipeline = createHttpPipeline<TRequest, TTx>(options, 'idempotent()', requestOperation);
  const wrapped = (request: TRequest, ...args: TArgs): Promise<Response> =>
    pipeline.handle({
      context: request,
      request,
      body: (maxBodyBytes) => readRequestBody(request, maxBodyBytes),
      async run(claim) {
        attachClaim(request, claim);
        return handler(request as TRequest & ClaimCarrier<TTx>, ...args);
      },
    });
  const claim = (request: Request) => idempotencyClaim(request) as ClaimContext<TTx> | undefined;
  return Object.assign(wrapped, { claim, engine: pipeline.engine, describeEndpoint: pipeline.describeEndpoint });
}
