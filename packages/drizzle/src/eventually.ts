/**
 * A value now or later: SQLite's driver (better-sqlite3) answers synchronously and its
 * transactions must not span an `await`, PostgreSQL's drivers answer with promises. The steps of
 * atomic mode are written once, with {@link chain}, and stay synchronous on SQLite.
 */
export type Eventually<T> = T | Promise<T>;

export function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    (typeof value === 'object' || typeof value === 'function') &&
    value !== null &&
    typeof (value as { then?: unknown }).then === 'function'
  );
}

/** `next(value)`: at once when `value` is there, after it resolves when it is a promise. */
export function chain<A, B>(value: Eventually<A>, next: (value: A) => Eventually<B>): Eventually<B> {
  return isThenable(value) ? (value as Promise<A>).then(next) : next(value);
}

/** `run(item)` for each item in turn, each after the previous one settled; synchronous while every run answers at once. */
export function eachInTurn<T>(items: readonly T[], run: (item: T) => Eventually<unknown>): Eventually<void> {
  for (let i = 0; i < items.length; i++) {
    const done = run(items[i]!);
    if (isThenable(done)) return (done as Promise<unknown>).then(() => eachInTurn(items.slice(i + 1), run));
  }
}
