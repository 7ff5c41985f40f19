/**
 * How one host's outcomes are stored and replayed (E2, E4): one typed codec per adapter, from a
 * live handler outcome to the record's kind, status and body, and from a record to what the
 * adapter replays. The engine stores and replays only through it.
 */
import {
  defaultErrorCodec,
  OutcomeNotStoredError,
  OutcomeTooLargeError,
  serializeValue,
  deserializeValue,
  type ErrorCodec,
  type OutcomeSerializer,
} from './outcome.js';

/** What a handler did: returned a value or threw. */
export type HandlerOutcome<T> = { ok: true; value: T } | { ok: false; error: unknown };

/** An outcome as a record holds it: its kind, HTTP status and text. */
export interface EncodedOutcome {
  kind: 'success' | 'error';
  status: number;
  body: string;
}

/**
 * One host's outcome protocol. `TLive` is what its handler returns; `TStored` what a replay
 * gives back (the stored form: for an HTTP host the captured response, for GraphQL the stored
 * result), so that a replay is typed as what it is.
 */
export interface OutcomeCodec<TLive, TStored = TLive> {
  /**
   * The record's kind, status and body for a handler's outcome. A value the codec cannot write is
   * encoded as the {@link OutcomeNotStoredError} that says the request was executed; a value it
   * knows to be too large without writing it throws {@link OutcomeTooLargeError}. A returned value
   * encoded as kind `'error'` is a failure: in atomic mode its writes are rolled back (E4).
   */
  encode(outcome: HandlerOutcome<TLive>): EncodedOutcome;
  /** E2: a stored outcome as the adapter replays it: a value, or the error to answer. */
  decode(stored: EncodedOutcome): HandlerOutcome<TStored>;
  /**
   * Whether a success value carries errors of its own (a GraphQL result with `errors`): a success
   * for the engine, a failure for an operator. Sets `withErrors` on `completed` and `replayed`.
   */
  carriesErrors?(value: TLive | TStored): boolean;
}

/** The parts {@link outcomeCodec} builds a codec from. */
export interface OutcomeCodecParts<TLive, TStored> {
  /** Writes a success value; may throw {@link OutcomeTooLargeError}. */
  stringify(value: TLive): string;
  /** Reads back what `stringify` wrote. */
  parse(text: string): TStored;
  /** The status a success value is stored with (A1). Defaults to 200. */
  statusOf?(value: TLive): number;
  /** How errors are stored and rebuilt. Defaults to {@link defaultErrorCodec}. */
  errors?: ErrorCodec;
  carriesErrors?(value: TLive | TStored): boolean;
}

/** A codec from a writer and a reader of success values and an {@link ErrorCodec}. */
export function outcomeCodec<TLive, TStored>(parts: OutcomeCodecParts<TLive, TStored>): OutcomeCodec<TLive, TStored> {
  const { stringify, parse, statusOf, errors = defaultErrorCodec, carriesErrors } = parts;
  return {
    encode(outcome) {
      if (!outcome.ok) return encodeError(errors, outcome.error);
      const status = statusOf ? statusOf(outcome.value) : 200;
      let body: string;
      try {
        body = stringify(outcome.value);
        if (typeof body !== 'string') throw new TypeError('[idem] the serializer did not return a string');
      } catch (error) {
        if (error instanceof OutcomeTooLargeError) throw error;
        // E4: the handler ran, so something must be stored; a value that cannot be written is
        // replayed as a 500 naming the cause rather than executed twice.
        const reason = error instanceof Error ? error.message : String(error);
        return encodeError(
          errors,
          new OutcomeNotStoredError(
            `[idem] this request was executed (outcome: success, status ${status}), but its result could not be serialized for replay (${reason}). Do not retry it: look the result up instead.`,
            { executed: true, reason: 'unserializable', outcomeKind: 'success', status },
          ),
        );
      }
      return { kind: 'success', status, body };
    },
    decode: ({ kind, body }) =>
      kind === 'success' ? { ok: true, value: parse(body) } : { ok: false, error: errors.revive(JSON.parse(body)) },
    ...(carriesErrors ? { carriesErrors } : {}),
  };
}

/** The error kind of a stored outcome: `error` described by `errors`, as JSON. */
export function encodeError(errors: ErrorCodec, error: unknown): EncodedOutcome {
  const description = errors.describe(error);
  return { kind: 'error', status: description.status, body: JSON.stringify(description) };
}

/** The inputs of {@link serializerCodec}: the options `serializer`, `errors` and `statusOf` that adapters document. */
export interface SerializerCodecOptions {
  /** Success values: `JSON` (default) or anything with `stringify`/`parse`, such as `superjson`. */
  serializer?: OutcomeSerializer | undefined;
  /** How errors are stored and rebuilt. Defaults to {@link defaultErrorCodec}. */
  errors?: ErrorCodec | undefined;
  /** The status a success value is stored with. Defaults to 200. */
  statusOf?: ((value: unknown) => number) | undefined;
}

/**
 * The codec of a host whose values are whatever its serializer round-trips (`undefined`
 * included): a replayed value is the serializer's output, so it is `unknown` until the adapter
 * reads it.
 */
export function serializerCodec({
  serializer = JSON,
  errors,
  statusOf,
}: SerializerCodecOptions = {}): OutcomeCodec<unknown, unknown> {
  return outcomeCodec<unknown, unknown>({
    stringify: (value) => serializeValue(serializer, value),
    parse: (text) => deserializeValue(serializer, text),
    ...(statusOf ? { statusOf } : {}),
    ...(errors ? { errors } : {}),
    carriesErrors: (value) => serializer.carriesErrors?.(value) === true,
  });
}

/** Whether an outcome is a failure for an operator: an error, or a success value that carries errors. */
export function withErrors<TLive, TStored>(
  codec: OutcomeCodec<TLive, TStored>,
  kind: EncodedOutcome['kind'],
  value: TLive | TStored | undefined,
): boolean {
  if (kind === 'error') return true;
  if (value === undefined || !codec.carriesErrors) return false;
  try {
    return codec.carriesErrors(value) === true;
  } catch {
    return false;
  }
}

/** An outcome whose body is over the limit becomes a 500 that tells what happened (see `maxStoredBytes`). */
export function boundedOutcome<TLive, TStored>(
  codec: OutcomeCodec<TLive, TStored>,
  outcome: EncodedOutcome,
  maxStoredBytes: number,
): EncodedOutcome {
  const size = Buffer.byteLength(outcome.body, 'utf8');
  if (size <= maxStoredBytes) return outcome;
  return tooLargeOutcome(codec, outcome.kind, outcome.status, size, maxStoredBytes, false);
}

/** The 500 stored for an outcome over `maxStoredBytes`; `atLeast`: `bytes` is what was seen of a larger one. */
export function tooLargeOutcome<TLive, TStored>(
  codec: OutcomeCodec<TLive, TStored>,
  kind: EncodedOutcome['kind'],
  status: number,
  bytes: number,
  maxStoredBytes: number,
  atLeast: boolean,
): EncodedOutcome {
  const size = atLeast ? `at least ${bytes} bytes` : `${bytes} bytes`;
  return codec.encode({
    ok: false,
    error: new OutcomeNotStoredError(
      `[idem] this request was executed (outcome: ${kind}, status ${status}), but its result (${size}) is larger than the ${maxStoredBytes} bytes idem stores, so it cannot be replayed. Do not retry it: look the result up instead.`,
      { executed: true, reason: 'too_large', outcomeKind: kind, status, bytes, maxStoredBytes },
    ),
  });
}
