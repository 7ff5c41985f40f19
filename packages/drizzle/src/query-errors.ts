import type { DrizzleQueryError } from 'drizzle-orm/errors';
import { isDrizzleQueryError } from './drizzle-seams.js';

/**
 * K5: a drizzle query error's message holds the statement's parameters — stored response
 * bodies, keys, tokens — and stores hand their errors to the engine, which emits them in
 * `storeError` events that users log. The store rethrows them as this error instead: the
 * driver's own message and code, with the driver error as `cause`, and no parameters.
 */
export class StoreQueryError extends Error {
  /** The driver's error code, e.g. PostgreSQL's SQLSTATE `57P01` or SQLite's `SQLITE_BUSY`. */
  readonly code: string | undefined;

  constructor(error: DrizzleQueryError) {
    const cause = error.cause;
    super(
      `[idem] store query failed: ${cause?.message ?? 'unknown driver error'}`,
      cause === undefined ? undefined : { cause },
    );
    this.name = 'StoreQueryError';
    const code = (cause as { code?: unknown } | undefined)?.code;
    this.code = typeof code === 'string' ? code : undefined;
  }
}

/** `error`, as a {@link StoreQueryError} when it is drizzle's query error (which lists the parameters). */
export function withoutParameters(error: unknown): unknown {
  return isDrizzleQueryError(error) ? new StoreQueryError(error) : error;
}

/** `method`, rejecting with {@link withoutParameters} of what it rejects with. */
export function rejectingWithoutParameters<A extends unknown[], R>(
  method: (...args: A) => Promise<R>,
): (...args: A) => Promise<R> {
  return async (...args) => {
    try {
      return await method(...args);
    } catch (error) {
      throw withoutParameters(error);
    }
  };
}
