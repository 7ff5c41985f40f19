/**
 * How outcomes become text and back (E2, E4). Success values go through a serializer —
 * anything with `stringify`/`parse`, so both `JSON` and `superjson` fit as they are. Errors
 * are described as JSON by an {@link ErrorCodec}, so a replay rethrows the same code,
 * message and status.
 */
export interface OutcomeSerializer {
  stringify(value: any): string;
  parse(text: string): any;
  /**
   * Whether a success value carries errors of its own — a GraphQL result with `errors` is a
   * success for the engine (it is stored and replayed as it is) but a failure for an operator.
   * It sets `withErrors` on the `completed` and `replayed` events. Defaults to never.
   */
  carriesErrors?(value: unknown): boolean;
}

/** Whether an outcome is a failure for an operator: an error, or a success value that carries errors. */
export function outcomeWithErrors(serializer: OutcomeSerializer, kind: 'success' | 'error', value: unknown): boolean {
  if (kind === 'error') return true;
  try {
    return serializer.carriesErrors?.(value) === true;
  } catch {
    return false;
  }
}

/** What is stored of a thrown error. */
export interface StoredErrorDescription {
  name: string;
  message: string;
  /** A stable code, e.g. tRPC's `INTERNAL_SERVER_ERROR` or a GraphQL `extensions.code`. */
  code: string;
  /** HTTP status. 500 for unexpected exceptions. */
  status: number;
  /** JSON-safe extras an adapter needs to rebuild the error (e.g. GraphQL extensions). */
  data?: unknown;
}

export interface ErrorCodec {
  describe(error: unknown): StoredErrorDescription;
  revive(description: StoredErrorDescription): unknown;
}

/** An error rebuilt from a stored outcome by the default codec. */
export class ReplayedError extends Error {
  readonly code: string;
  readonly status: number;
  readonly data: unknown;
  constructor(description: StoredErrorDescription) {
    super(description.message);
    this.name = description.name;
    this.code = description.code;
    this.status = description.status;
    this.data = description.data;
  }
}

/** The `name` of an {@link OutcomeNotStoredError}, as its stored description keeps it. */
const OUTCOME_NOT_STORED = 'IdempotencyOutcomeNotStored';

/**
 * What the engine stores, through the endpoint's codec, when the handler ran but its outcome
 * cannot be stored as it is (too large for `maxStoredBytes`, or not serializable): a 500 whose
 * message says the request *was* executed, so a retry neither runs it again nor pretends
 * nothing happened. `data` tells how it ended.
 */
export class OutcomeNotStoredError extends Error {
  readonly code = 'INTERNAL_SERVER_ERROR';
  readonly status = 500;
  constructor(
    message: string,
    readonly data: {
      executed: true;
      reason: 'too_large' | 'unserializable';
      outcomeKind: 'success' | 'error';
      status: number;
      bytes?: number;
      maxStoredBytes?: number;
    },
  ) {
    super(message);
    this.name = OUTCOME_NOT_STORED;
  }
}

/**
 * E4: whether a stored error is the engine's {@link OutcomeNotStoredError} (the request was
 * executed, its result not stored), for a codec that replays it in its host's own shape.
 */
export function describesOutcomeNotStored(description: StoredErrorDescription): boolean {
  return description.name === OUTCOME_NOT_STORED;
}

/**
 * Thrown by a serializer (or the adapter that feeds it) for a success value too large to store,
 * when its size is known without serializing it: an HTTP response body streamed past
 * `maxStoredBytes`, say. The engine then stores what it stores for any outcome over the limit
 * (see `maxStoredBytes`: a 500 that says the request was executed), with these figures.
 */
export class OutcomeTooLargeError extends Error {
  constructor(
    /** The bytes seen so far: the value holds at least this many. */
    readonly bytes: number,
    /** The status the value would have answered with (an HTTP response's). Defaults to 200. */
    readonly status = 200,
  ) {
    super(`[idem] the outcome holds at least ${bytes} bytes`);
    this.name = 'OutcomeTooLargeError';
  }
}

/** The default codec: reads `code`, `status` (or `statusCode`) and `data` when an error has them. */
export const defaultErrorCodec: ErrorCodec = {
  describe(error) {
    if (error instanceof Error) {
      const { code, status, statusCode, data } = error as Error & {
        code?: unknown;
        status?: unknown;
        statusCode?: unknown;
        data?: unknown;
      };
      const httpStatus = typeof status === 'number' ? status : typeof statusCode === 'number' ? statusCode : 500;
      const description: StoredErrorDescription = {
        name: error.name,
        message: error.message,
        code: typeof code === 'string' ? code : 'INTERNAL_SERVER_ERROR',
        status: httpStatus,
      };
      if (data !== undefined) description.data = data;
      return description;
    }
    return { name: 'Error', message: String(error), code: 'INTERNAL_SERVER_ERROR', status: 500 };
  },
  revive: (description) => new ReplayedError(description),
};

const UNDEFINED_BODY = '';

/** @internal The stored text of a success value (the engine's). */
export function serializeValue(serializer: OutcomeSerializer, value: unknown): string {
  if (value === undefined) return UNDEFINED_BODY;
  const text = serializer.stringify(value);
  if (typeof text !== 'string') throw new TypeError('[idem] the serializer did not return a string');
  return text;
}

/** @internal */
export function deserializeValue(serializer: OutcomeSerializer, text: string): unknown {
  return text === UNDEFINED_BODY ? undefined : serializer.parse(text);
}
