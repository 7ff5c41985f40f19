import { TRPCError, type TRPC_ERROR_CODE_KEY, type TRPCDefaultErrorShape, type TRPCErrorShape } from '@trpc/server';
import type { IdempotencyError, ProblemDetails } from '@idem/core';

/** X2: the tRPC code of each idempotency status, so the HTTP status is 400/409/422/503. */
const TRPC_CODE_BY_STATUS: Record<IdempotencyError['status'], TRPC_ERROR_CODE_KEY> = {
  400: 'BAD_REQUEST',
  409: 'CONFLICT',
  422: 'UNPROCESSABLE_CONTENT',
  503: 'SERVICE_UNAVAILABLE',
};

/**
 * What `error.data.idempotency` holds for an idempotency error (X2): the problem details
 * (RFC 9457) with the stable `code` and, on 409 and 503, `retryAfter` in seconds.
 */
export type IdempotencyErrorData = ProblemDetails;

/** A `TRPCError` raised by the middleware for an idempotency error. Its `cause` is that error. */
class IdempotencyTRPCError extends TRPCError {
  constructor(
    error: IdempotencyError,
    readonly problem: ProblemDetails,
  ) {
    super({ code: TRPC_CODE_BY_STATUS[error.status], message: error.message, cause: error });
  }
}

/** Errors the middleware replayed from the store (E2), for {@link idempotencyErrorFormatter}. */
const replayedErrors = new WeakSet<object>();

/** Marks `error` as a replayed stored outcome; returns it. */
export function markReplayedError(error: unknown): unknown {
  if (error !== null && typeof error === 'object') replayedErrors.add(error);
  return error;
}

/** Live failures the middleware left resumable (E8), for {@link idempotencyErrorFormatter}. */
const resumableErrors = new WeakSet<object>();

/** Marks `error` as a live failure left resumable (E8); returns it. */
export function markResumableError(error: unknown): unknown {
  if (error !== null && typeof error === 'object') resumableErrors.add(error);
  return error;
}

/**
 * Whether a tRPC error is a live failure of a procedure with `onFailure: 'resume'` that left its
 * key resumable (E8): a retry with the same key and input runs it again, skipping its completed
 * steps. `idempotencyErrorFormatter` puts it in `error.data.idempotentResumable`, per call (a lone
 * call also has the `Idempotent-Resumable: true` header).
 */
export function isResumableError(error: unknown): boolean {
  return error !== null && typeof error === 'object' && resumableErrors.has(error);
}

/**
 * Whether a tRPC error is a stored outcome the middleware replayed (E2) in a batch of several
 * calls, where `Idempotent-Replayed` covers the whole response and cannot tell the calls apart,
 * or in a streamed response (`httpBatchStreamLink`), whose headers left before the call ran;
 * `idempotencyErrorFormatter` puts it in `error.data.idempotentReplayed`. (A lone call's replay
 * has the header and a body byte-identical to the first answer.)
 */
export function isReplayedError(error: unknown): boolean {
  return error !== null && typeof error === 'object' && replayedErrors.has(error);
}

/** Turns an idempotency error and its problem body into the `TRPCError` the client gets. */
export function toTRPCError(error: IdempotencyError, problem: ProblemDetails): TRPCError {
  return new IdempotencyTRPCError(error, problem);
}

/**
 * The idempotency problem carried by a tRPC error, or `undefined` when the error is not an
 * idempotency error. Use it to compose with your own `errorFormatter`:
 *
 * ```ts
 * errorFormatter: ({ shape, error }) => ({ ...shape, data: { ...shape.data, idempotency: idempotencyErrorData(error), zod: ... } })
 * ```
 */
export function idempotencyErrorData(error: unknown): IdempotencyErrorData | undefined {
  return error instanceof IdempotencyTRPCError ? { ...error.problem } : undefined;
}

/**
 * The shape {@link idempotencyErrorFormatter} returns: tRPC's, with `data.idempotency` on
 * idempotency errors, `data.idempotentReplayed: true` on replayed stored errors and
 * `data.idempotentResumable: true` on live failures left resumable (E8).
 */
export type IdempotencyErrorShape<TShape extends TRPCErrorShape = TRPCDefaultErrorShape> = TShape & {
  data: TShape['data'] & { idempotency?: IdempotencyErrorData; idempotentReplayed?: true; idempotentResumable?: true };
};

/**
 * X2: an `errorFormatter` that adds `data.idempotency = { code, type, title, detail, status, retryAfter? }`
 * to idempotency errors, `data.idempotentReplayed: true` to stored errors the middleware replayed
 * in a batch of several calls or in a stream (E2: the per-call counterpart of `Idempotent-Replayed`),
 * `data.idempotentResumable: true` to live failures of a procedure with `onFailure: 'resume'` that
 * left the key resumable (E8: the per-call counterpart of `Idempotent-Resumable`; retry with the
 * same key), and leaves every other error's shape as it is.
 *
 * ```ts
 * const t = initTRPC.context<Context>().create({ errorFormatter: idempotencyErrorFormatter });
 * ```
 */
export const idempotencyErrorFormatter = <TShape extends TRPCErrorShape>({
  shape,
  error,
}: {
  shape: TShape;
  error: TRPCError;
}): IdempotencyErrorShape<TShape> => {
  const idempotency = idempotencyErrorData(error);
  if (idempotency !== undefined) return { ...shape, data: { ...shape.data, idempotency } };
  if (isResumableError(error)) return { ...shape, data: { ...shape.data, idempotentResumable: true as const } };
  return isReplayedError(error) ? { ...shape, data: { ...shape.data, idempotentReplayed: true as const } } : shape;
};
