/**
 * One HTTP request through idem, for every host on the Fetch standard (`idempotent()` for a
 * `(Request) => Response` handler, the Hono middleware): method, key, body, scope, fingerprint,
 * execution, and the answer as a `Response` — the handler's, a replay, or a refusal.
 */
import {
  IDEMPOTENCY_KEY_HEADER,
  isIdempotencyError,
  type ClaimContext,
  type EndpointPolicyDescription,
  type IdempotencyEngine,
  type IdempotencyError,
} from '@idem/core';
import {
  createAdapterKit,
  finalFailure,
  IDEMPOTENT_RESUMABLE_HEADER,
  isFinalFailure,
  notStartedAnswer,
} from '@idem/core/adapter';
import type { HttpIdempotencyOptions } from './options.js';
import {
  fingerprintInput,
  isPlainObject,
  readBody,
  RequestBodyTooLargeError,
  type FingerprintSettings,
} from './request-body.js';
import {
  captureResponse,
  problemResponse,
  replayHeaderSet,
  responseCodec,
  type AboutBlankProblem,
} from './stored-response.js';

const DEFAULT_METHODS = ['POST', 'PATCH'];
const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE']);
const DEFAULT_MAX_BODY_BYTES = 1024 * 1024;

/** One request as the host hands it over. */
export interface Exchange<TContext> {
  /** What `principal` and `operation` read. */
  context: TContext;
  request: Request;
  /** The body as received, read without taking it from the handler, within `maxBodyBytes` (413 past it). */
  body(maxBodyBytes: number): Promise<Uint8Array>;
  /** Runs the handler; `claim` is the claim it runs under (undefined: it runs without idempotency). */
  run(claim: ClaimContext | undefined): Promise<Response>;
}

export interface HttpPipeline<TContext, TTx> {
  readonly engine: IdempotencyEngine<TTx>;
  handle(exchange: Exchange<TContext>): Promise<Response>;
  /** R4: the route `operation` (`POST /v1/payments`) as the published policy lists it. */
  describeEndpoint(operation: string): EndpointPolicyDescription;
}

/** Responses a handler returned through {@link notStarted}. */
const notStartedResponses = new WeakSet<Response>();

/**
 * E4: answers `response` without storing it, for a refusal made before the handler's real work
 * started — input validation, an authorization check: the claim is released, so the client can
 * retry with the same key once it fixed its request. `return notStarted(Response.json(problem, { status: 400 }))`.
 * Every other response, of any status, is the stored outcome.
 */
export function notStarted(response: Response): Response {
  notStartedResponses.add(response);
  return response;
}

export function createHttpPipeline<TContext, TTx>(
  options: HttpIdempotencyOptions<TContext, TTx>,
  adapter: string,
  defaultOperation: (context: TContext) => string,
): HttpPipeline<TContext, TTx> {
  const kit = createAdapterKit(options, { name: adapter, field: 'JSON body field' });
  const {
    methods = DEFAULT_METHODS,
    operation = defaultOperation,
    fingerprintHeaders = [],
    fingerprintQuery = false,
    replayHeaders = [],
    maxBodyBytes = DEFAULT_MAX_BODY_BYTES,
  } = options;
  const keyed = keyedMethods(methods, adapter);
  const stored = replayHeaderSet(replayHeaders, adapter);
  const { maxStoredBytes } = kit.engine.policy;
  const settings: FingerprintSettings = {
    fingerprintHeaders: fingerprintHeaders.map((name) => name.trim().toLowerCase()),
    fingerprintQuery,
    keyField: kit.key.field,
  };
  const keyField = kit.key.field;

  async function handle(exchange: Exchange<TContext>): Promise<Response> {
    const { request } = exchange;
    if (!keyed.has(request.method.toUpperCase())) return exchange.run(undefined);
    let answer: Answer;
    try {
      answer = await execute(exchange);
    } catch (error) {
      if (error instanceof RequestBodyTooLargeError) return problemResponse(contentTooLarge(error));
      if (isIdempotencyError(error)) return refusal(error, request);
      throw error;
    }
    if (answer.kind === 'response') return answer.response;
    if (answer.kind === 'passThrough') return exchange.run(undefined);
    // The handler threw (now, or when the stored outcome was made): the host answers it, as it would without idem.
    throw answer.error;
  }

  type Answer = { kind: 'response'; response: Response } | { kind: 'passThrough' } | { kind: 'thrown'; error: unknown };

  async function execute({ request, context, body, run }: Exchange<TContext>): Promise<Answer> {
    const op = operation(context);
    const header = kit.headerKey(request.headers.get(IDEMPOTENCY_KEY_HEADER));
    // No key can come and none is needed: the request runs as it is, its body unread.
    if (header === undefined && keyField === false && !kit.isRequired(op)) {
      kit.unkeyed(op, false);
      return { kind: 'passThrough' };
    }
    const read = readBody(request.headers.get('content-type'), await body(maxBodyBytes));
    const field =
      keyField !== false && 'json' in read && isPlainObject(read.json) ? kit.fieldKey(read.json[keyField]) : undefined;
    const key = kit.chooseKey(op, { header, field });
    if (key === undefined) return { kind: 'passThrough' };
    const scopeOf = await kit.scopes(context);
    const fingerprint = await kit.fingerprint(fingerprintInput(request, read, settings));

    const result = await kit.execute({ ...scopeOf(op), key, fingerprint, codec: responseCodec }, async (claim) => {
      const response = await run(claim);
      // E4: answered before the work started: the claim is released, nothing stored.
      if (notStartedResponses.has(response)) return notStartedAnswer(response);
      const captured = await captureResponse(response, stored, maxStoredBytes);
      // E8: `finalFailure(response)` marks the handler's response; the engine sees what was captured of it.
      return isFinalFailure(response) ? finalFailure(captured) : captured;
    });
    if ('notStarted' in result) return { kind: 'response', response: result.answer };
    // The handler threw (now, or when the stored outcome was made): the host answers it, as it would without idem.
    if (!result.ok) return { kind: 'thrown', error: result.error };
    if (result.replayed) return { kind: 'response', response: result.value };
    const { live } = result.value;
    return { kind: 'response', response: result.resumable ? markedResumable(live) : live };
  }

  /** X1: the refusal as problem+json, its type resolved against the request's URL, `Retry-After` on 409 and 503. */
  function refusal(error: IdempotencyError, request: Request): Response {
    return problemResponse(kit.problem(error, request.url), error.headers());
  }

  const keySources = [
    ...(kit.key.header ? ['Idempotency-Key header'] : []),
    ...(keyField === false ? [] : [`JSON body field ${keyField}`]),
  ];
  const describeEndpoint = (op: string) => kit.describe('http', op, keySources);
  return { engine: kit.engine, handle, describeEndpoint };
}

/**
 * E8: the handler's own response, marked `Idempotent-Resumable: true`: its failure left the key
 * resumable, and a retry with the same key and request completes the work. A copy, because the
 * headers of a response the handler got from `fetch` cannot be changed.
 */
function markedResumable(response: Response): Response {
  const headers = new Headers(response.headers);
  headers.set(IDEMPOTENT_RESUMABLE_HEADER, 'true');
  return new Response(response.body, { status: response.status, statusText: response.statusText, headers });
}

function keyedMethods(methods: readonly string[], adapter: string): ReadonlySet<string> {
  const keyed = new Set<string>();
  for (const method of methods) {
    const name = method.trim().toUpperCase();
    if (SAFE_METHODS.has(name))
      throw new TypeError(
        `[idem] ${adapter}: \`methods\` cannot include ${name}: safe methods are never keyed (a GET, HEAD, OPTIONS or TRACE changes nothing, so it always passes through)`,
      );
    keyed.add(name);
  }
  return keyed;
}

function contentTooLarge(error: RequestBodyTooLargeError): AboutBlankProblem {
  return { type: 'about:blank', title: 'Content Too Large', status: 413, detail: error.message };
}
