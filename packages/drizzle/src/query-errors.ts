import type { DrizzleQueryError } from 'drizzle-orm/errors';
import { isDrizzleQueryError } from './drizzle-seams.js';
import { isThenable } from './eventually.js';

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

/**
 * Rethrows drizzle query errors of every method of `target` as {@link StoreQueryError}; every
 * method answers a promise. Not an `async` wrapper: one promise layer less on the replay path.
 */
export function withoutQueryParameters<T extends object>(target: T): T {
  const wrapped = { ...target } as Record<string, unknown>;
  for (const [name, value] of Object.entries(target)) {
    if (typeof value !== 'function') continue;
    wrapped[name] = (...args: unknown[]) => {
      try {
        const result: unknown = (value as (...a: unknown[]) => unknown).apply(target, args);
        return isThenable(result)
          ? (result as Promise<unknown>).then(undefined, rethrowWithoutParameters)
          : Promise.resolve(result);
      } catch (error) {
        return Promise.reject(withoutParameters(error));
      }
    };
  }
  return wrapped as T;
}

function withoutParameters(error: unknown): unknown {
  return isDrizzleQueryError(error) ? new StoreQueryError(error) : error;
}

function rethrowWithoutParameters(error: unknown): never {
  throw withoutParameters(error);
}
