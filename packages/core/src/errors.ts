/**
 * Typed idempotency errors (SPEC X1). Each has a stable string `code`, an HTTP `status`,
 * `retryAfter` (seconds) where it applies, and renders as RFC 9457 problem+json.
 */

/** Stable error codes. They never change once published: clients may switch on them. */
export type IdempotencyErrorCode =
  | 'idempotency_key_missing'
  | 'idempotency_key_invalid'
  | 'idempotency_key_ambiguous'
  | 'idempotency_input_too_deep'
  | 'idempotency_scope_too_long'
  | 'idempotency_request_in_progress'
  | 'idempotency_key_reused'
  | 'idempotency_key_expired'
  | 'idempotency_store_unavailable';

/** RFC 9457 problem details, with the idempotency code as an extension member. */
export interface ProblemDetails {
  /** The problem type: the documentation URL with the code as fragment ({@link problemType}). */
  type: string;
  title: string;
  status: number;
  detail: string;
  code: IdempotencyErrorCode;
  /** Seconds, mirrored from the `Retry-After` header on 409 and 503. */
  retryAfter?: number;
}

/**
 * The default documentation URL, where the policy is published (R4): a path, which the adapters
 * resolve against the URL of each request they answer (see `resolveDocumentationUrl`).
 */
export const DEFAULT_DOCUMENTATION_URL = '/idempotency';

/**
 * The RFC 9457 problem type of `code`: the documentation URL with the code as its fragment, e.g.
 * `https://api.example.com/idempotency#idempotency_key_missing`. Each kind of problem has its
 * own type (RFC 9457 makes `type` its primary identifier), documented under that anchor of the
 * policy page (`createPolicyDocument`, `renderPolicyHtml`).
 */
export function problemType(documentationUrl: string, code: IdempotencyErrorCode): string {
  const fragment = documentationUrl.indexOf('#');
  return `${fragment === -1 ? documentationUrl : documentationUrl.slice(0, fragment)}#${code}`;
}

export abstract class IdempotencyError extends Error {
  abstract readonly code: IdempotencyErrorCode;
  abstract readonly status: 400 | 409 | 422 | 503;
  abstract readonly title: string;
  /** Seconds the client should wait before retrying (409, 503). */
  readonly retryAfter: number | undefined;

  constructor(detail: string, options?: { retryAfter?: number; cause?: unknown }) {
    super(detail, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.retryAfter = options?.retryAfter;
  }

  /**
   * The problem+json body (RFC 9457). `type` is {@link problemType}: the documentation URL with
   * this error's code as fragment. Pass an absolute URL (the adapters resolve the configured one
   * against the request).
   */
  toProblem(documentationUrl: string = DEFAULT_DOCUMENTATION_URL): ProblemDetails {
    const problem: ProblemDetails = {
      type: problemType(documentationUrl, this.code),
      title: this.title,
      status: this.status,
      detail: this.message,
      code: this.code,
    };
    if (this.retryAfter !== undefined) problem.retryAfter = this.retryAfter;
    return problem;
  }

  /** Response headers that belong with this error (`Retry-After` on 409 and 503). */
  headers(): Record<string, string> {
    return this.retryAfter === undefined ? {} : { 'Retry-After': String(this.retryAfter) };
  }
}

/** K2: the endpoint requires a key and none (or an empty one) was sent. 400. */
export class MissingKeyError extends IdempotencyError {
  readonly code = 'idempotency_key_missing' as const;
  readonly status = 400 as const;
  readonly title = 'Idempotency-Key is missing';
  constructor(detail = 'This operation is idempotent and requires an Idempotency-Key.') {
    super(detail);
  }
}

/** Why a key was refused (K3). */
export type InvalidKeyReason = 'too_long' | 'charset' | 'syntax' | 'multiple';

/** K3: the key is too long, has a character outside visible ASCII, or is not a valid sf-string. 400. */
export class InvalidKeyError extends IdempotencyError {
  readonly code = 'idempotency_key_invalid' as const;
  readonly status = 400 as const;
  readonly title = 'Idempotency-Key is invalid';
  constructor(
    readonly reason: InvalidKeyReason,
    detail: string,
  ) {
    super(detail);
  }
}

/** K4: the header and the argument both carry a key, and they differ. 400. */
export class AmbiguousKeyError extends IdempotencyError {
  readonly code = 'idempotency_key_ambiguous' as const;
  readonly status = 400 as const;
  readonly title = 'Idempotency keys disagree';
  constructor(detail = 'The Idempotency-Key header and the idempotency key argument differ; send one key.') {
    super(detail);
  }
}

/**
 * F1: the input is nested deeper than the fingerprint reads (`MAX_FINGERPRINT_DEPTH`). 400;
 * nothing was claimed or executed.
 */
export class InputTooDeepError extends IdempotencyError {
  readonly code = 'idempotency_input_too_deep' as const;
  readonly status = 400 as const;
  readonly title = 'Input nested too deeply';
  constructor(
    readonly maxDepth: number,
    detail = `The input is nested more than ${maxDepth} levels deep, deeper than the idempotency fingerprint reads; nothing was executed. Send a flatter input.`,
  ) {
    super(detail);
  }
}

/**
 * S1: the scope (principal and operation) is longer than every store can hold in its primary key
 * (`MAX_SCOPE_BYTES`). 400, before anything is claimed: the same request would never fit, so a
 * "retry later" would be a lie.
 */
export class ScopeTooLongError extends IdempotencyError {
  readonly code = 'idempotency_scope_too_long' as const;
  readonly status = 400 as const;
  readonly title = 'Idempotency scope too long';
  constructor(
    readonly bytes: number,
    readonly maxBytes: number,
    detail = `The idempotency scope of this request (the caller's principal and the operation) is ${bytes} bytes long in UTF-8; at most ${maxBytes} can be stored, so it cannot be made idempotent and nothing was executed. The principal is what grows: call as a principal with a shorter id.`,
  ) {
    super(detail);
  }
}

/** E3: a request with the same key is still being processed. 409 with `Retry-After`. Never stored. */
export class RequestInProgressError extends IdempotencyError {
  readonly code = 'idempotency_request_in_progress' as const;
  readonly status = 409 as const;
  readonly title = 'Server processing previous request';
  constructor(
    retryAfter: number,
    detail = 'A request with the same Idempotency-Key is still being processed. Retry later with the same key and payload.',
  ) {
    super(detail, { retryAfter });
  }
}

/** F3: the key was used before with a different payload. 422; nothing executed. */
export class FingerprintMismatchError extends IdempotencyError {
  readonly code = 'idempotency_key_reused' as const;
  readonly status = 422 as const;
  readonly title = 'Idempotency-Key reused with a different payload';
  constructor(
    detail = 'This Idempotency-Key is already associated with a request with another payload. Use a new key for a new request.',
  ) {
    super(detail);
  }
}

/**
 * R2 (policy `expiredReuse: 'reject'`): the key was used before and its retention has passed.
 * 422: the client must reconcile (look the operation up) instead of retrying with this key.
 */
export class KeyExpiredError extends IdempotencyError {
  readonly code = 'idempotency_key_expired' as const;
  readonly status = 422 as const;
  readonly title = 'Idempotency-Key expired';
  constructor(
    readonly previous: { firstSeenAt: Date; completedAt: Date | null; expiresAt: Date; status: number | null },
    detail = `This Idempotency-Key was first used at ${previous.firstSeenAt.toISOString()} and its retention ended at ${previous.expiresAt.toISOString()}. Reconcile the earlier request before sending a new one with a new key.`,
  ) {
    super(detail);
  }
}

/** E5: the idempotency store cannot be reached. 503 with `Retry-After`; the handler did not run. */
export class StoreUnavailableError extends IdempotencyError {
  readonly code = 'idempotency_store_unavailable' as const;
  readonly status = 503 as const;
  readonly title = 'Idempotency store unavailable';
  constructor(retryAfter: number, cause?: unknown) {
    super(
      cause instanceof StoreConfigurationError
        ? `The idempotency store is misconfigured; the request was not executed. ${cause.message.replace(/^\[idem\] /, '')}`
        : 'The idempotency store is unavailable; the request was not executed. Retry later with the same key.',
      { retryAfter, cause },
    );
  }
}

/**
 * E5: a store that cannot serve because it is set up wrong, not because it is down: its tables do
 * not exist (`createDrizzleStore` over a database without `idem migrate`, or without the
 * `tables: { prefix }` the migration used), for one. Stores throw it; the engine answers 503 as for
 * any store failure (nothing runs), with a detail that says what is wrong, and logs it once per
 * engine with `[idem]`: a retry does not fix it, the operator does.
 */
export class StoreConfigurationError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'StoreConfigurationError';
  }
}

export function isIdempotencyError(error: unknown): error is IdempotencyError {
  return error instanceof IdempotencyError;
}
