/**
 * `@idem/fetch/hono` — the Hono middleware: `app.post('/orders', idempotency({ store, principal }), handler)`.
 * Hono is an optional peer dependency; this entry imports only its types.
 */
import type { Context, Env, MiddlewareHandler } from 'hono';
import { attachClaim } from '@idem/core/adapter';
import {
  idempotencyClaim,
  type ClaimContext,
  type EndpointPolicyDescription,
  type IdempotencyEngine,
} from '@idem/core';
import type { HttpIdempotencyOptions } from './options.js';
import { createHttpPipeline } from './pipeline.js';
import { readAtMost, checkContentLength, RequestBodyTooLargeError } from './request-body.js';

/** The options of {@link idempotency}: `principal` and `operation` read Hono's `Context`. */
export type HonoIdempotencyOptions<E extends Env = Env, TTx = unknown> = HttpIdempotencyOptions<Context<E>, TTx>;

/**
 * The middleware {@link idempotency} returns. `claim(c)` is the claim the handler runs under,
 * typed with the store's transaction (`claim(c)?.tx` in atomic mode; `idempotencyClaim(c)` is the
 * same, untyped). `engine` is the engine it runs on (`engine.drain()` on shutdown waits for
 * outcome writes being retried, E7).
 */
export type HonoIdempotencyMiddleware<E extends Env = Env, TTx = unknown> = MiddlewareHandler<E> & {
  claim(c: Context<E>): ClaimContext<TTx> | undefined;
  readonly engine: IdempotencyEngine<TTx>;
  /**
   * R4: a route it is put on as the published policy lists it — key sources, `required`,
   * retention, lease, wait, reuse rule and `onFailure` — under `operation`, the method and route
   * template (`'POST /orders/:id'`).
   */
  describeEndpoint(operation: string): EndpointPolicyDescription;
};

/**
 * The default operation (S1): the method and the template of the route that answers
 * (`POST /orders/:id`, Hono's matched route, as `routePath(c, -1)` of `hono/route` reads it), so
 * that the scope and the telemetry label are one per route, not one per id in the path. The same
 * key on `/orders/1` and then `/orders/2` is then one record asked two things: 422 (F3; the
 * fingerprint holds the path). Without a matched route, the path (`c.req.path`).
 */
export const honoOperation = (c: Context): string => {
  // `matchedRoutes` (every Hono 4) lists the middlewares' routes, then the handler's: the last one answers.
  const template = c.req.matchedRoutes.at(-1)?.path;
  return `${c.req.method} ${template ?? c.req.path}`;
};

/**
 * Makes the Hono routes it is put on idempotent, as `idempotent()` does for a Fetch handler: the
 * response the route produced is stored (E4) — the handler's, or what `app.onError` made of a
 * thrown error — and replayed byte for byte with `Idempotent-Replayed: true` (E2); refusals are
 * problem+json (409 with `Retry-After`, 422, 400, 503). GET, HEAD and OPTIONS pass through.
 *
 * ```ts
 * app.post('/orders', idempotency({ store, principal: (c) => c.get('userId') }), async (c) => c.json(order, 201));
 * ```
 *
 * With `onFailure: 'resume'` (E8, Stripe v2), a 5xx response (a handler's, or what `app.onError`
 * made of a thrown error) is answered with `Idempotent-Resumable: true` and not replayed: a retry
 * with the same key and request completes the work, `idempotencyClaim(c).step(name, run)` skipping
 * the steps done; a 4xx, or `finalFailure(response)`, is stored and replayed.
 *
 * Put validators (`validator`, `zValidator`) and authentication before it: what they refuse is
 * never stored. The handler finds its claim on the context: `idempotencyClaim(c)?.deriveKey('psp')`.
 */
export function idempotency<E extends Env = Env, TTx = unknown>(
  options: HonoIdempotencyOptions<E, TTx>,
): HonoIdempotencyMiddleware<E, TTx> {
  const pipeline = createHttpPipeline<Context<E>, TTx>(options, 'idempotency()', honoOperation);
  const middleware: MiddlewareHandler<E> = async (c, next) => {
    let ran = false;
    const response = await pipeline.handle({
      context: c,
      request: c.req.raw,
      body: (maxBodyBytes) => honoBody(c, maxBodyBytes),
      async run(claim) {
        ran = true;
        attachClaim(c, claim);
        await next();
        return c.res;
      },
    });
    if (!ran) return response;
    // Hono answers with `c.res` once a handler ran; start it afresh, so that nothing of the
    // response read for storing is merged into the one the client gets.
    c.res = undefined;
    c.res = response;
  };
  const claim = (c: Context<E>) => idempotencyClaim(c) as ClaimContext<TTx> | undefined;
  return Object.assign(middleware, { claim, engine: pipeline.engine, describeEndpoint: pipeline.describeEndpoint });
}

/**
 * The body as received: from a clone of the raw request while it is unread, so that the handler
 * reads it as usual; through Hono's body cache when a middleware before this one read it.
 */
async function honoBody(c: Context, maxBodyBytes: number): Promise<Uint8Array> {
  const raw = c.req.raw;
  checkContentLength(raw.headers, maxBodyBytes);
  if (raw.bodyUsed) {
    const bytes = new Uint8Array(await c.req.arrayBuffer());
    if (bytes.byteLength > maxBodyBytes) throw new RequestBodyTooLargeError(maxBodyBytes);
    return bytes;
  }
  const bytes = await readAtMost(raw.body === null ? null : raw.clone().body, maxBodyBytes);
  if (bytes === undefined) throw new RequestBodyTooLargeError(maxBodyBytes);
  return bytes;
}
