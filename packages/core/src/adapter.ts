/**
 * `@idem/core/adapter` — for adapter authors: the per-request pipeline every host adapter runs
 * (`@idem/trpc`, `@idem/envelop`, `@idem/fetch`), written once. An adapter translates its host's shapes (a tRPC
 * call, a GraphQL operation) into these steps and maps the outcome back:
 *
 * 1. the key, from its sources (K1–K4): the `Idempotency-Key` header (one per request: the batch
 *    rule) and the key field (a tRPC input field, a GraphQL argument), then `required` (K2);
 * 2. the principal, then the scope of each operation (S1);
 * 3. the fingerprint (F1, F2), without the key field;
 * 4. the execution, atomic or not (E1–E4), the claim on the context for the resolvers, the
 *    host's outcomes stored and replayed through its typed {@link OutcomeCodec}, and "the
 *    handler did not start" returned as one value ({@link notStartedAnswer});
 * 5. a refusal (400, 409, 422, 503) as a problem (X1), its type resolved against the request.
 */
import { atomicModeOf } from './atomic-mode.js';
import { IDEMPOTENCY_CLAIM, type ClaimCarrier, type ClaimContext } from './claim.js';
import { resolveDocumentationUrl } from './documentation-url.js';
import {
  createEngine,
  formatScope,
  type EngineOptions,
  type ExecuteRequest,
  type ExecuteResult,
  type HandlerReturn,
  type IdempotencyEngine,
} from './engine.js';
import { AmbiguousKeyError, MissingKeyError, type IdempotencyError, type ProblemDetails } from './errors.js';
import { computeFingerprint, type FingerprintOption } from './fingerprint.js';
import { describeEndpoint, type EndpointPolicyDescription } from './policy.js';
import { DEFAULT_KEY_FIELD, parseIdempotencyKey, readArgumentKey, type KeyOptions } from './key.js';

/**
 * K2: which operations refuse to run without a key (400 `idempotency_key_missing`, nothing
 * executed): all (`true`), none (`false`: they run without idempotency), the listed operations,
 * or those a function picks. An operation is a tRPC procedure path (`payments.create`) or a
 * GraphQL root mutation field (`createPayment`).
 */
export type RequiredOption = boolean | readonly string[] | ((operation: string) => boolean);

/**
 * The options every adapter takes: the engine's (`store`, `retention`, `lease`, `expiredReuse`,
 * `serializer`, `onEvent`, `documentationUrl`, `conflictRetryAfter`, `unavailableRetryAfter`,
 * `maxStoredBytes`), which reach the engine as they are, and these.
 */
export interface AdapterOptions<TContext, TTx = unknown> extends EngineOptions<TTx> {
  /**
   * S1 (required): who the key belongs to — tenant, account or user — read from the request
   * context. Keys are scoped per principal, so a stored response is never replayed to another
   * caller. For keys shared by every caller, pass `sharedPrincipal` explicitly.
   */
  principal: (context: TContext) => string | Promise<string>;
  /**
   * K2: which operations require a key (see {@link RequiredOption}). Defaults to `true`: an
   * operation is made idempotent on purpose, and a client that forgets the key is exactly the
   * retry that would run twice, so it is refused rather than run unprotected. Pass a list (or
   * `false`) where some operations may run without one.
   */
  required?: RequiredOption;
  /** Where keys come from. Defaults to `{ header: true, field: 'idempotencyKey' }`. */
  key?: KeyOptions;
  /** F1/F2: how the input is fingerprinted. Defaults to `'default'` (SHA-256 of the canonical input). */
  fingerprint?: FingerprintOption;
  /**
   * Atomic mode: the resolver runs inside the store's database transaction and finds it as
   * `idempotencyClaim(ctx).tx` (the Drizzle transaction). Its writes through `tx` commit together
   * with the claim and the stored outcome, or not at all: a crash before the commit leaves
   * nothing, so the retry executes cleanly; a resolver error rolls its writes back (the error is
   * still stored and replayed, E4); a transaction that fails to commit answers 503. Needs a store
   * with atomic mode (`AtomicMode` in `@idem/core/store`, which says which stores have it); refused
   * when the adapter is created otherwise. Defaults to `false`.
   */
  atomic?: boolean;
}

/** How an adapter names itself and its key field in `[idem]` messages. */
export interface AdapterDescription {
  /** The factory, e.g. `idempotency()` or `useIdempotency`. */
  name: string;
  /** What the key field is in this host: `input field`, `argument`. */
  field: string;
}

/** The scope of one operation and its parts: the `scope`, `operation` and `principal` of an {@link ExecuteRequest}. */
export interface RequestScope {
  scope: string;
  operation: string;
  principal: string;
}

/** The pipeline of one adapter, built once from its options by {@link createAdapterKit}. */
export interface AdapterKit<TContext, TTx = unknown> {
  readonly engine: IdempotencyEngine<TTx>;
  /** The key sources, defaults applied. */
  readonly key: { header: boolean; field: string | false };
  /**
   * K1, K4: the key of a request's `Idempotency-Key` header (`raw`, as the host has it), or
   * undefined when the header is not read or not sent. `operations` is how many mutation
   * operations the request carries: one header key cannot identify several (400).
   */
  headerKey(raw: string | readonly string[] | null | undefined, operations?: number): string | undefined;
  /** K4: the key in a key field's value (absent, `null` or `''`: none); `name` for the message. */
  fieldKey(value: unknown, name?: string): string | undefined;
  /** K2, K4: the key of one operation from its sources: equal if both are sent; required or not. */
  chooseKey(operation: string, sources: { header: string | undefined; field: string | undefined }): string | undefined;
  /** K2: whether `operation` refuses to run without a key. */
  isRequired(operation: string): boolean;
  /**
   * K2: reports an `unkeyed` event (a mutation without a key: `refused`, or run without
   * idempotency) to `onEvent`. `chooseKey` reports its own; call it where a request is let
   * through or refused without asking `chooseKey`.
   */
  unkeyed(operation: string, refused: boolean): void;
  /**
   * S1: resolves the principal once, and returns the scope of each operation under it, with its
   * parts: spread it into the request (`{ ...scopeOf(operation), key, … }`), so that the events
   * carry `operation` and `principal` beside `scope`.
   */
  scopes(context: TContext): Promise<(operation: string) => RequestScope>;
  /** F1: the fingerprint of `input`, under the `fingerprint` option; `exclude` names top-level fields left out. */
  fingerprint(input: unknown, exclude?: readonly string[]): Promise<string | null>;
  /**
   * E1–E4: one unit, through `engine.execute`, or `engine.executeAtomic` in atomic mode (`claim.tx`).
   * `request.codec` is how this host's outcomes are stored and replayed; a handler whose work did
   * not start returns {@link notStartedAnswer}.
   */
  execute<TLive, TStored = TLive, TAnswer = never>(
    request: ExecuteRequest<TLive, TStored>,
    handler: (claim: ClaimContext<TTx>) => Promise<HandlerReturn<TLive, TAnswer>>,
  ): Promise<ExecuteResult<TLive, TStored, TAnswer>>;
  /** X1: the problem body of a refusal, its type resolved against the URL of the request it answers. */
  problem(error: IdempotencyError, requestUrl: string | undefined): ProblemDetails;
  /**
   * R4: `operation` as the published policy lists it (`createPolicyDocument`): its transport and
   * key sources, whether it requires a key (K2), and the engine's retention, lease, wait, reuse
   * rule and `onFailure` (E8); `stored` and `fingerprint` in the transport's default words.
   */
  describe(
    transport: EndpointPolicyDescription['transport'],
    operation: string,
    keySources: string[],
  ): EndpointPolicyDescription;
}

/**
 * Checks the options that encode a policy and builds the adapter's pipeline; the engine gets
 * the options as they are.
 * @throws TypeError `[idem] …` when `principal` is missing, `key.field` is empty, or `atomic`
 *   is set on a store without atomic mode.
 */
export function createAdapterKit<TContext, TTx>(
  options: AdapterOptions<TContext, TTx>,
  adapter: AdapterDescription,
): AdapterKit<TContext, TTx> {
  const {
    principal,
    required = true,
    fingerprint = 'default',
    key: { header = true, field = DEFAULT_KEY_FIELD } = {},
    atomic = false,
  } = options;
  if (typeof principal !== 'function') {
    throw new TypeError(
      `[idem] ${adapter.name} needs a \`principal(context)\` function (S1): return the caller's tenant, account or user id, or pass \`sharedPrincipal\` for keys shared by every caller`,
    );
  }
  if (field === '')
    throw new TypeError(`[idem] ${adapter.name}: \`key.field\` must be a field name, or false for none`);
  if (atomic)
    atomicModeOf(options.store, { asking: `${adapter.name}: \`atomic: true\``, otherwise: 'leave `atomic` off' });
  const engine = createEngine(options);
  const { onEvent } = options;
  const unkeyed = (operation: string, refused: boolean) => {
    try {
      onEvent?.({ type: 'unkeyed', operation, refused });
    } catch {
      // A logging hook must never change the outcome of a request.
    }
  };
  const isRequired = (operation: string) =>
    typeof required === 'boolean'
      ? required
      : typeof required === 'function'
        ? required(operation)
        : required.includes(operation);

  return {
    engine,
    key: { header, field },
    headerKey(raw, operations = 1) {
      const key = header ? parseIdempotencyKey(raw) : undefined;
      if (key !== undefined && operations > 1) {
        const instead = field === false ? '' : `, or send each key in its \`${field}\` ${adapter.field}`;
        throw new AmbiguousKeyError(
          `One Idempotency-Key header was sent with ${operations} mutation operations in one batched request, so it identifies none of them; nothing was executed. Send each mutation in its own request${instead}.`,
        );
      }
      return key;
    },
    fieldKey: (value, name = field || DEFAULT_KEY_FIELD) => readArgumentKey(value, name),
    chooseKey(operation, sources) {
      if (sources.header !== undefined && sources.field !== undefined && sources.header !== sources.field)
        throw new AmbiguousKeyError();
      const key = sources.header ?? sources.field;
      if (key === undefined) {
        const refused = isRequired(operation);
        unkeyed(operation, refused);
        if (refused) throw new MissingKeyError();
      }
      return key;
    },
    isRequired,
    unkeyed,
    async scopes(context) {
      const id = await principal(context);
      return (operation) => ({ scope: formatScope(operation, id), operation, principal: id });
    },
    fingerprint: (input, exclude = []) => computeFingerprint(input, fingerprint, exclude),
    execute: (request, handler) => (atomic ? engine.executeAtomic(request, handler) : engine.execute(request, handler)),
    problem: (error, requestUrl) =>
      error.toProblem(resolveDocumentationUrl(engine.policy.documentationUrl, requestUrl)),
    describe(transport, operation, keySources) {
      const { retentionMs, leaseMs, waitMs, expiredReuse, onFailure } = engine.policy;
      return describeEndpoint({
        transport,
        operation,
        keySources,
        required: isRequired(operation),
        retentionMs,
        leaseMs,
        waitMs,
        expiredReuse,
        onFailure,
      });
    },
  };
}

/** The fields that make a context carry `claim`, for hosts that extend a context by merging (tRPC's `next({ ctx })`). */
export function claimFields<TTx>(claim: ClaimContext<TTx>): Required<ClaimCarrier<TTx>> {
  return { [IDEMPOTENCY_CLAIM]: claim };
}

/**
 * Puts `claim` on `context` itself, for hosts whose context must keep its identity (a GraphQL
 * context other plugins hold on to); `undefined` takes it off again.
 */
export function attachClaim(context: object, claim: ClaimContext<unknown> | undefined): void {
  if (claim === undefined) delete (context as { [IDEMPOTENCY_CLAIM]?: unknown })[IDEMPOTENCY_CLAIM];
  else Object.assign(context, claimFields(claim));
}

export { claimForPart, IDEMPOTENCY_CLAIM, type ClaimCarrier } from './claim.js';
export { DEFAULT_KEY_FIELD, IDEMPOTENT_RESUMABLE_HEADER, type KeyOptions } from './key.js';
export { finalFailure, isFinalFailure } from './final-failure.js';
export { retentionMsOf } from './failure-mode.js';
export { StepResultTooLargeError, MAX_STEP_NAME_LENGTH } from './steps.js';
export {
  defaultErrorCodec,
  describesOutcomeNotStored,
  OutcomeNotStoredError,
  OutcomeTooLargeError,
} from './outcome.js';
export type { ErrorCodec, OutcomeSerializer, StoredErrorDescription } from './outcome.js';
export {
  encodeError,
  outcomeCodec,
  serializerCodec,
  type EncodedOutcome,
  type HandlerOutcome,
  type OutcomeCodec,
  type OutcomeCodecParts,
  type SerializerCodecOptions,
} from './outcome-codec.js';
export { isNotStartedAnswer, notStartedAnswer, saidNotStarted, type NotStartedAnswer } from './not-started.js';
export type { ExecuteRequest, ExecuteResult, HandlerReturn } from './engine.js';
