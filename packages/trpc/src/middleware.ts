import type { TRPCMiddlewareFunction } from '@trpc/server';
import {
  HandlerNotStartedError,
  IDEMPOTENCY_KEY_HEADER,
  IDEMPOTENT_REPLAYED_HEADER,
  batchedHeaderKeyError,
  claimContextFields,
  computeFingerprint,
  createAdapterEngine,
  formatScope,
  isIdempotencyError,
  parseIdempotencyKey,
  readArgumentKey,
  resolveDocumentationUrl,
  resolveKey,
  type ClaimContext,
  type IdempotencyEngine,
  type IdempotencyError,
} from '@idem/core';
import { getTransport, type IdempotencyTransport } from './context.js';
import { trpcErrorCodec } from './error-codec.js';
import { markReplayedError, toTRPCError } from './error-mapping.js';
import { replayedResult } from './middleware-result.js';
import { DEFAULT_KEY_FIELD, type IdempotencyOptions } from './options.js';

type MiddlewareOptions<TContext> = Omit<Parameters<TRPCMiddlewareFunction<object, any, object, object, unknown>>[0], 'ctx'> & { ctx: TContext };
type MiddlewareReturn = ReturnType<TRPCMiddlewareFunction<any, any, object, object, unknown>>;

/**
 * The middleware {@link idempotency} returns: pass it to `.use()`. `engine` is the engine it
 * runs on (`engine.drain()` on shutdown waits for outcome writes being retried, E7).
 */
export interface IdempotencyMiddleware<TContext> {
  (opts: MiddlewareOptions<TContext>): MiddlewareReturn;
  readonly engine: IdempotencyEngine;
}

/**
 * Makes mutations idempotent: the first call with a key runs and its outcome (output or error)
 * is stored; a retry with the same key and input replays it without running the resolver (E2),
 * a concurrent one gets 409 with `Retry-After` (E3), one with another input 422 (F3).
 * Queries and subscriptions pass through untouched.
 *
 * Place it last, right before the resolver, after `.input()` and your auth middlewares: the
 * fingerprint is taken over the validated input (F1), errors raised before it are never stored,
 * and errors of middlewares placed after it are stored as outcomes (E4).
 *
 * ```ts
 * const idempotent = idempotency({ store, principal: (ctx) => ctx.user.id });
 * const createOrder = authed.input(orderSchema).use(idempotent).mutation(({ input }) => ...);
 * ```
 *
 * With `atomic: true` (PostgreSQL), the resolver runs inside the store's transaction and writes
 * through `idempotencyClaim(ctx).tx`, committed together with the claim and the stored outcome.
 */
export function idempotency<TContext extends object = object>(options: IdempotencyOptions<TContext>): IdempotencyMiddleware<TContext> {
  const { principal, required = true, fingerprint = 'default', key: keyOptions = {}, atomic = false } = options;
  const { from = 'header', field = DEFAULT_KEY_FIELD } = keyOptions;
  const engine = createAdapterEngine(options, 'idempotency()');
  const { documentationUrl } = engine.policy;
  const fingerprintExclude = from === 'header' ? [] : [field];

  async function readKey(opts: MiddlewareOptions<TContext>, transport: IdempotencyTransport | undefined): Promise<string | undefined> {
    let header: string | undefined;
    if (from !== 'input') {
      if (!transport && from === 'header') {
        throw new Error('[idem] the Idempotency-Key header cannot be read: spread `idempotencyContext(opts)` into what createContext returns');
      }
      header = parseIdempotencyKey(transport?.requestHeader(IDEMPOTENCY_KEY_HEADER));
      const mutations = countMutationCalls(transport);
      if (header !== undefined && mutations > 1) {
        throw batchedHeaderKeyError(mutations, `Send each keyed mutation in its own request, or put the key in the \`${field}\` input field.`);
      }
    }
    const argument = from === 'header' ? undefined : await readInputKey(opts);
    return resolveKey({ header, argument }, required);
  }

  async function readInputKey(opts: MiddlewareOptions<TContext>): Promise<string | undefined> {
    let value = fieldOf(opts.input, field);
    if (value === undefined) value = fieldOf(await opts.getRawInput(), field);
    return readArgumentKey(value, field);
  }

  const middleware = async (opts: MiddlewareOptions<TContext>): MiddlewareReturn => {
    if (opts.type !== 'mutation') return opts.next();
    const transport = getTransport(opts.ctx);
    try {
      const key = await readKey(opts, transport);
      if (key === undefined) return await opts.next();
      const scope = formatScope(opts.path, await principal(opts.ctx));
      // F1: the validated input. None means the middleware sits before `.input()` (or the procedure
      // takes none): the raw input then, so a different payload is still never replayed (F3).
      const subject = opts.input === undefined ? await opts.getRawInput() : opts.input;
      const requestFingerprint = await computeFingerprint(subject, fingerprint, fingerprintExclude);

      let executed: Awaited<MiddlewareReturn> | undefined;
      const handler = async (claim: ClaimContext) => {
        // The claim rides along in ctx (under a symbol) for `idempotencyClaim(ctx)?.deriveKey(…)`
        // and, in atomic mode, `idempotencyClaim(ctx).tx`.
        executed = await opts.next({ ctx: claimContextFields(claim) });
        if (executed.ok) return executed.data;
        // tRPC wraps what a resolver throws; a HandlerNotStartedError must reach the engine
        // as itself so it releases the claim instead of storing the failure (E4). In atomic
        // mode the throw also rolls the resolver's writes back.
        throw executed.error.cause instanceof HandlerNotStartedError ? executed.error.cause : executed.error;
      };
      const request = { scope, key, fingerprint: requestFingerprint, errors: trpcErrorCodec };
      const result = atomic ? await engine.executeAtomic(request, (_tx, claim) => handler(claim)) : await engine.execute(request, handler);
      if (!result.replayed && executed) return executed;
      const wholeResponse = markReplayedCall(transport);
      if (result.ok) return replayedResult(result.value);
      throw wholeResponse ? result.error : markReplayedError(result.error);
    } catch (error) {
      if (!isIdempotencyError(error)) throw error;
      setRetryAfter(transport, error);
      throw toTRPCError(error, resolveDocumentationUrl(documentationUrl, transport?.requestUrl?.()));
    }
  };
  return Object.assign(middleware, { engine });
}

/**
 * Mutation calls in this HTTP request (`httpBatchLink` sends several in one). tRPC refuses a
 * request that mixes procedure types, so every call of a request that reached a mutation is one.
 */
function countMutationCalls(transport: IdempotencyTransport | undefined): number {
  return transport?.info?.calls.length ?? 1;
}

/** How many calls of each HTTP request were answered with a replay. */
const replayedCalls = new WeakMap<IdempotencyTransport, number>();

/**
 * E2: `Idempotent-Replayed: true` says the whole response is a replay, so in a batch it is set
 * only once every call of the request was answered with a replay; a call that executed (or did
 * not go through this middleware) keeps it off. Answers whether the header speaks for this one
 * call: otherwise (a batch, or a streamed response, whose headers left before the call ran) a
 * replayed error is marked in its own `error.data.idempotentReplayed` (see
 * `idempotencyErrorFormatter`), while a lone call's body stays byte-identical to the first answer.
 */
function markReplayedCall(transport: IdempotencyTransport | undefined): boolean {
  const calls = countMutationCalls(transport);
  if (!transport) return calls <= 1;
  const replayed = (replayedCalls.get(transport) ?? 0) + 1;
  replayedCalls.set(transport, replayed);
  if (replayed >= calls) transport.setResponseHeader(IDEMPOTENT_REPLAYED_HEADER, 'true');
  return calls <= 1 && !isStreamed(transport);
}

/**
 * `httpBatchStreamLink` asks for a JSON Lines stream (`trpc-accept: application/jsonl`): tRPC
 * sends its status and headers before the procedures run, so no header reaches the client.
 */
function isStreamed(transport: IdempotencyTransport): boolean {
  return transport.info?.accept === 'application/jsonl';
}

/** E3/E5: `Retry-After` on 409 and 503. In a batch, the longest wait wins. */
function setRetryAfter(transport: IdempotencyTransport | undefined, error: IdempotencyError): void {
  if (!transport || error.retryAfter === undefined) return;
  const current = Number(transport.responseHeader('Retry-After'));
  const seconds = Number.isFinite(current) ? Math.max(current, error.retryAfter) : error.retryAfter;
  transport.setResponseHeader('Retry-After', String(seconds));
}

function fieldOf(input: unknown, field: string): unknown {
  return input !== null && typeof input === 'object' && !Array.isArray(input) ? (input as Record<string, unknown>)[field] : undefined;
}
