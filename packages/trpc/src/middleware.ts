import type { TRPCMiddlewareFunction } from '@trpc/server';
import {
  IDEMPOTENCY_KEY_HEADER,
  IDEMPOTENT_REPLAYED_HEADER,
  isIdempotencyError,
  type ClaimCarrier,
  type EndpointPolicyDescription,
  type IdempotencyEngine,
  type IdempotencyError,
} from '@idem/core';
import {
  claimFields,
  createAdapterKit,
  finalFailure,
  IDEMPOTENT_RESUMABLE_HEADER,
  isFinalFailure,
  notStartedAnswer,
  saidNotStarted,
  serializerCodec,
  type AdapterKit,
} from '@idem/core/adapter';
import { getTransport, type IdempotencyTransport } from './context.js';
import { trpcErrorCodec } from './error-codec.js';
import { markReplayedError, markResumableError, toTRPCError } from './error-mapping.js';
import { replayedResult, type MiddlewareResult } from './middleware-result.js';
import type { IdempotencyOptions } from './options.js';

type MiddlewareOptions<TContext> = Omit<
  Parameters<TRPCMiddlewareFunction<object, any, object, object, unknown>>[0],
  'ctx'
> & { ctx: TContext };

/**
 * The middleware {@link idempotency} returns: pass it to `.use()`. The procedures after it see
 * the claim in their context, typed with the store's transaction: `idempotencyClaim(ctx)?.tx`.
 * `engine` is the engine it runs on (`engine.drain()` on shutdown waits for outcome writes being
 * retried, E7).
 */
export interface IdempotencyMiddleware<TContext, TTx = unknown> {
  (opts: MiddlewareOptions<TContext>): Promise<MiddlewareResult<ClaimCarrier<TTx>>>;
  readonly engine: IdempotencyEngine<TTx>;
  /**
   * R4: the procedure at `path` (`payments.create`) as the published policy lists it, with this
   * middleware's key sources, `required`, retention, lease, wait, reuse rule and `onFailure`:
   * `createPolicyDocument({ documentationUrl, endpoints: [idempotent.describeEndpoint('payments.create')] })`.
   */
  describeEndpoint(path: string): EndpointPolicyDescription;
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
 * With `atomic: true` (a store with atomic mode: `AtomicMode` in `@idem/core/store`), the resolver
 * runs inside the store's transaction and writes through `idempotencyClaim(ctx).tx`, committed
 * together with the claim and the stored outcome.
 *
 * With `onFailure: 'resume'` (E8, Stripe v2), a failure after the resolver started (a thrown
 * error, a 5xx code) is not replayed: the call's error carries `data.idempotentResumable: true`
 * (and a lone call's response `Idempotent-Resumable: true`), and a retry with the same key and
 * input runs the resolver again, `idempotencyClaim(ctx).step(name, run)` skipping the steps it
 * already completed. A 4xx code, or an error thrown as `finalFailure(error)`, is stored and replayed.
 */
export function idempotency<TContext extends object = object, TTx = unknown>(
  options: IdempotencyOptions<TContext, TTx>,
): IdempotencyMiddleware<TContext, TTx> {
  const kit = createAdapterKit(options, { name: 'idempotency()', field: 'input field' });
  const keyField = kit.key.field;
  // How a procedure's outcome is stored: its value through the user's `serializer`, its error as tRPC's.
  const codec = serializerCodec({ serializer: options.serializer, errors: trpcErrorCodec });

  const middleware = async (opts: MiddlewareOptions<TContext>): Promise<MiddlewareResult<ClaimCarrier<TTx>>> => {
    if (opts.type !== 'mutation') return opts.next();
    const transport = getTransport(opts.ctx);
    try {
      const key = await readKey(kit, opts, transport);
      if (key === undefined) return await opts.next();
      const scopeOf = await kit.scopes(opts.ctx);
      // F1: the validated input. None means the middleware sits before `.input()` (or the procedure
      // takes none): the raw input then, so a different payload is still never replayed (F3).
      const subject = opts.input === undefined ? await opts.getRawInput() : opts.input;
      const fingerprint = await kit.fingerprint(subject, keyField === false ? [] : [keyField]);

      let executed: MiddlewareResult<ClaimCarrier<TTx>> | undefined;
      const result = await kit.execute({ ...scopeOf(opts.path), key, fingerprint, codec }, async (claim) => {
        const call = await opts.next({ ctx: claimFields(claim) });
        executed = call;
        // E4: the resolver said `notStarted(ctx, …)`: its result is answered as it is, nothing stored.
        if (saidNotStarted(claim)) return notStartedAnswer(call);
        if (call.ok) return call.data;
        // E8: tRPC wraps a plain error in a TRPCError (its `cause`): a `finalFailure(…)` mark on either is the call's.
        throw isFinalFailure(call.error) || isFinalFailure(call.error.cause) ? finalFailure(call.error) : call.error;
      });
      if ('notStarted' in result) return result.answer;
      if (!result.replayed && executed) {
        if (result.resumable && !executed.ok) markResumableCall(transport, executed.error);
        return executed;
      }
      const wholeResponse = markReplayedCall(transport);
      if (result.ok) return replayedResult(result.value);
      throw wholeResponse ? result.error : markReplayedError(result.error);
    } catch (error) {
      if (!isIdempotencyError(error)) throw error;
      setRetryAfter(transport, error);
      throw toTRPCError(error, kit.problem(error, transport?.requestUrl?.()));
    }
  };
  const keySources = [
    ...(kit.key.header ? ['Idempotency-Key header'] : []),
    ...(keyField === false ? [] : [`input field ${keyField}`]),
  ];
  const describeEndpoint = (path: string) => kit.describe('trpc', path, keySources);
  return Object.assign(middleware, { engine: kit.engine, describeEndpoint });
}

/** K1, K4: the call's key, from the header (one per request) and the input field. */
async function readKey(
  kit: Pick<AdapterKit<unknown>, 'key' | 'headerKey' | 'fieldKey' | 'chooseKey'>,
  opts: MiddlewareOptions<unknown>,
  transport: IdempotencyTransport | undefined,
): Promise<string | undefined> {
  const { header: readsHeader, field } = kit.key;
  if (readsHeader && !transport) {
    throw new Error(
      '[idem] the Idempotency-Key header cannot be read: spread `idempotencyContext(opts)` into what createContext returns',
    );
  }
  const header = kit.headerKey(transport?.requestHeader(IDEMPOTENCY_KEY_HEADER), countMutationCalls(transport));
  let value: unknown;
  if (field !== false) {
    value = fieldOf(opts.input, field);
    // A field the input schema does not declare (or strips) is read from the raw input.
    if (value === undefined) value = fieldOf(await opts.getRawInput(), field);
  }
  return kit.chooseKey(opts.path, { header, field: kit.fieldKey(value) });
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

/**
 * E8: a live failure that left its key resumable is marked per call in
 * `error.data.idempotentResumable` (see `idempotencyErrorFormatter`), and, for a lone call whose
 * headers have not left yet, with `Idempotent-Resumable: true` on the response: in a batch the
 * header would speak for every call of it.
 */
function markResumableCall(transport: IdempotencyTransport | undefined, error: unknown): void {
  markResumableError(error);
  if (transport && countMutationCalls(transport) <= 1 && !isStreamed(transport))
    transport.setResponseHeader(IDEMPOTENT_RESUMABLE_HEADER, 'true');
}

/** E3/E5: `Retry-After` on 409 and 503. In a batch, the longest wait wins. */
function setRetryAfter(transport: IdempotencyTransport | undefined, error: IdempotencyError): void {
  if (!transport || error.retryAfter === undefined) return;
  const current = Number(transport.responseHeader('Retry-After'));
  const seconds = Number.isFinite(current) ? Math.max(current, error.retryAfter) : error.retryAfter;
  transport.setResponseHeader('Retry-After', String(seconds));
}

function fieldOf(input: unknown, field: string): unknown {
  return input !== null && typeof input === 'object' && !Array.isArray(input)
    ? (input as Record<string, unknown>)[field]
    : undefined;
}
