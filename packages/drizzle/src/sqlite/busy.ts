/**
 * SQLite's write lock without blocking the event loop. better-sqlite3 runs every statement
 * synchronously, and its busy handler (`busy_timeout`) sleeps the thread while another
 * connection holds the write lock: every request of the process — health checks, replays —
 * waits behind it. `openDatabase` therefore opens SQLite with `busy_timeout = 0`, so a locked
 * database answers `SQLITE_BUSY` at once, and the store retries here: asynchronously, with
 * SQLite's own back-off steps, for a bounded time, then rejects (the engine answers 503).
 */

/** How long the store retries a statement that found the database locked. */
export const DEFAULT_BUSY_RETRY_MS = 5000;

/** The sleeps of SQLite's default busy handler (sqlite3.c, `sqliteDefaultBusyCallback`), in ms; then the last, repeated. */
const BACK_OFF_MS = [1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100] as const;

/** Whether `error` (or one of its causes) is SQLite's `SQLITE_BUSY`, in any of its extended codes. */
export function isSqliteBusy(error: unknown): boolean {
  for (let cause = error, depth = 0; cause instanceof Error && depth < 8; cause = cause.cause, depth++) {
    const code = (cause as { code?: unknown }).code;
    if (typeof code === 'string' && code.startsWith('SQLITE_BUSY')) return true;
  }
  return false;
}

/**
 * `run()`; when it fails with `SQLITE_BUSY` (and `retryable(error)` agrees), `run` again after
 * each back-off step, without blocking, until it succeeds or `timeoutMs` have passed, then the
 * last error is thrown. `run` must have done nothing when it failed busy: one statement, or a
 * transaction that rolled back.
 */
export async function whileBusy<T>(
  run: () => T | Promise<T>,
  timeoutMs: number,
  retryable: (error: unknown) => boolean = isSqliteBusy,
): Promise<T> {
  try {
    return await run();
  } catch (error) {
    if (!retryable(error)) throw error;
    return retryUntil(run, Date.now() + timeoutMs, error, retryable);
  }
}

async function retryUntil<T>(
  run: () => T | Promise<T>,
  deadline: number,
  first: unknown,
  retryable: (error: unknown) => boolean,
): Promise<T> {
  let last = first;
  for (let step = 0; ; step++) {
    const wait = Math.min(BACK_OFF_MS[Math.min(step, BACK_OFF_MS.length - 1)]!, deadline - Date.now());
    if (wait <= 0) throw last;
    await new Promise((resolve) => setTimeout(resolve, wait));
    try {
      return await run();
    } catch (error) {
      if (!retryable(error)) throw error;
      last = error;
    }
  }
}

/**
 * For your own statements on a connection `openDatabase` opened (`busy_timeout = 0`): runs
 * `run`, and while it fails with `SQLITE_BUSY` (another connection or process holds the write
 * lock) runs it again, asynchronously, for up to `timeoutMs`, then rejects with the last error.
 * `run` must be one statement, or a transaction (which rolls back when it fails).
 *
 * ```ts
 * await retrySqliteBusy(() => db.insert(ledger).values(entry).run());
 * ```
 */
export function retrySqliteBusy<T>(
  run: () => T | Promise<T>,
  { timeoutMs = DEFAULT_BUSY_RETRY_MS }: { timeoutMs?: number } = {},
): Promise<T> {
  return whileBusy(run, timeoutMs);
}
