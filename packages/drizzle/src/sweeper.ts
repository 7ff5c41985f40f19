/**
 * Long work in batches (sweep, purge) with progress, a time budget and a stop signal, and the
 * scheduled sweeper an app starts beside its server (R3).
 */
import { toMilliseconds, type Duration } from '@idem/core';

/** Where a sweep or purge stands after one batch. */
export interface BatchProgress {
  /** Rows this batch archived (sweep) or deleted (purge). */
  rows: number;
  /** Rows so far, this batch included. */
  total: number;
  /** Batches so far, this one included. */
  batches: number;
  /** Milliseconds since the work began. */
  elapsedMs: number;
}

/** How a sweep or purge in batches is watched and bounded. */
export interface BatchOptions {
  /** Called after each batch; the next batch waits for a promise it returns. */
  onBatch?: (progress: BatchProgress) => void | Promise<void>;
  /** Stops after the batch during which this many milliseconds passed. Defaults to no limit. */
  budgetMs?: number;
  /** Stops after the current batch once aborted (Ctrl-C, a shutdown). */
  signal?: AbortSignal;
}

/**
 * Why the work ended: `done` (nothing left), `budget` (the time budget ran out), `signal` (the
 * signal was aborted), `lost-lock` (SQLite: another process took the sweep lease over).
 */
export type BatchStop = 'done' | 'budget' | 'signal' | 'lost-lock';

export interface BatchTotals {
  total: number;
  batches: number;
  elapsedMs: number;
  stopped: BatchStop;
}

/**
 * Runs each step in turn until it comes back short of `full`, batch after batch: `steps` are
 * the phases (purge: history, then live rows), each answering the rows of one batch.
 */
export async function inBatches(
  steps: readonly (() => Promise<number>)[],
  full: number,
  { onBatch, budgetMs, signal }: BatchOptions = {},
  stillHeld?: () => Promise<boolean>,
): Promise<BatchTotals> {
  if (budgetMs !== undefined && !(budgetMs > 0))
    throw new RangeError(`[idem] budgetMs must be a positive number of milliseconds, got ${budgetMs}`);
  const started = Date.now();
  let total = 0;
  let batches = 0;
  const totals = (stopped: BatchStop): BatchTotals => ({ total, batches, elapsedMs: Date.now() - started, stopped });
  for (const step of steps) {
    for (;;) {
      // A turn of the event loop, so that a signal handler (Ctrl-C) runs even where each batch
      // settles synchronously (better-sqlite3).
      if (signal) await new Promise((resolve) => setImmediate(resolve));
      if (signal?.aborted) return totals('signal');
      if (stillHeld && !(await stillHeld())) return totals('lost-lock');
      const rows = await step();
      total += rows;
      batches++;
      await onBatch?.({ rows, total, batches, elapsedMs: Date.now() - started });
      if (rows < full) break;
      if (budgetMs !== undefined && Date.now() - started >= budgetMs) return totals('budget');
    }
  }
  return totals('done');
}

/** One round of an exclusive sweep: skipped when another process was sweeping the same tables. */
export type SweepRound =
  | { skipped: true }
  | { skipped: false; archived: number; batches: number; elapsedMs: number; stopped: BatchStop };

/** What `startSweeper` needs of a store: `DrizzleStore` has it. */
export interface ExclusiveSweeper {
  sweepExclusive(options?: { batchSize?: number } & BatchOptions): Promise<SweepRound>;
}

export interface SweeperOptions {
  /** How often a round starts (`'5m'`, or milliseconds), counted from the end of the last one. Defaults to 5 minutes. */
  every?: Duration;
  /** Records archived per statement. Defaults to 1000. */
  batchSize?: number;
  /** Each round's time budget: a round stops after the batch during which it ran out. Defaults to no limit. */
  budget?: Duration;
  /** Called after each batch of a round that holds the lock. */
  onBatch?: (progress: BatchProgress) => void | Promise<void>;
  /** Called after each round, swept or skipped (`{ skipped: true }`: another process was sweeping). */
  onRound?: (round: SweepRound) => void;
  /**
   * Called when a round fails (the database unreachable, …); the next round is still scheduled.
   * Defaults to `console.error` with the `[idem]` prefix.
   */
  onError?: (error: unknown) => void;
}

export interface Sweeper {
  /** Runs a round now, unless one is running (then answers that round's result). */
  sweepNow(): Promise<SweepRound>;
  /** Cancels the next round and, if one is running, waits for its current batch to end. */
  stop(): Promise<void>;
}

/**
 * Sweeps expired records on a schedule, in this process, while no other process of the fleet is
 * sweeping the same tables (the dialect's lock, see docs/drizzle.md): the first round starts at once,
 * each next one `every` after the last ended. The timer does not keep the process alive.
 */
export function startSweeper(
  store: ExclusiveSweeper,
  {
    every = '5m',
    batchSize = 1000,
    budget,
    onBatch,
    onRound,
    onError = (error) => console.error('[idem] sweep failed:', error),
  }: SweeperOptions = {},
): Sweeper {
  const everyMs = toMilliseconds(every);
  if (!(everyMs > 0)) throw new RangeError(`[idem] startSweeper: every must be a positive duration, got ${every}`);
  const budgetMs = budget === undefined ? undefined : toMilliseconds(budget);
  const stopping = new AbortController();
  let timer: ReturnType<typeof setTimeout> | undefined;
  let running: Promise<SweepRound> | undefined;

  const schedule = () => {
    if (stopping.signal.aborted) return;
    timer = setTimeout(() => void round().catch(() => {}), everyMs);
    timer.unref?.();
  };
  const round = (): Promise<SweepRound> => {
    if (running) return running;
    clearTimeout(timer);
    running = store
      .sweepExclusive({ batchSize, budgetMs, onBatch, signal: stopping.signal })
      .then(
        (result) => {
          onRound?.(result);
          return result;
        },
        (error: unknown) => {
          onError(error);
          throw error;
        },
      )
      .finally(() => {
        running = undefined;
        schedule();
      });
    return running;
  };

  timer = setTimeout(() => void round().catch(() => {}), 0);
  timer.unref?.();
  return {
    sweepNow: round,
    async stop() {
      stopping.abort();
      clearTimeout(timer);
      await running?.catch(() => {});
    },
  };
}
