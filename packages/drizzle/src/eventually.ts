/**
 * A value now or later: SQLite's driver (better-sqlite3) answers synchronously and its
 * transactions must not span an `await`, PostgreSQL's drivers answer with promises. The steps of
 * atomic mode are written once, with {@link chain}, and stay synchronous on SQLite.
 */
export type Eventually<T> = T | Promise<T>;

export function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (typeof value === 'object' || typeof value === 'function') && value !== null && typeof (value as { then?: unknown }).then === 'function';
}

/** `next(value)`: at once when `value` is there, after it resolves when it is a promise. */
export function chain<A, B>(value: Eventually<A>, next: (value: A) => Eventually<B>): Eventually<B> {
  return isThenable(value) ? (value as Promise<A>).then(next) : next(value);
}
