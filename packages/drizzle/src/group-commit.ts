/**
 * Group commit: a batcher that sends calls which arrive while earlier writes are busy together,
 * as one statement (or one transaction) of the dialect's `many` form, and a lone call at once
 * through `one`. No timer ever delays a call: a group only forms out of calls that would have
 * waited anyway (for a free lane, or for the current tick to end).
 *
 * Failure: a group is one statement or one transaction, so when it fails nothing of it was
 * written. A failed group of more than one call is retried one call at a time (through `one`,
 * concurrently), so that one poisoned row cannot fail the others; each call then gets its own
 * result or its own error. A lone call's error is its own.
 */
import type { ClaimOwner, ClaimRequest } from '@idem/core/store';
import type { LiveRead } from './record-rows.js';
import type { FirstStep } from './store-statements.js';

/** How a group forms; see `StoreStatements.groupMode`. */
export type GroupMode = 'inFlight' | 'tick';

export interface GroupOptions {
  /**
   * 'inFlight': calls that arrive while `maxInFlight` groups are in flight queue, and go as one
   * group when a lane frees. 'tick': the first call runs at once; the calls made before the next
   * `setImmediate` go as one group then.
   */
  mode: GroupMode;
  /** 'inFlight' only: how many groups may be in flight at once (lanes). Defaults to {@link DEFAULT_MAX_IN_FLIGHT}. */
  maxInFlight?: number;
  /** The most calls in one group; a longer queue goes as several groups. Defaults to {@link DEFAULT_MAX_GROUP}. */
  maxGroup?: number;
  /** Whether a failed group of more than one call is retried one call at a time. Defaults to true. */
  retryAlone?: boolean;
}

/**
 * Lanes per batcher. A `pg.Pool` has 10 connections by default and the store runs two batchers
 * (claims, completions): 4 lanes each leave the pool room for the other statements (reads,
 * compare-and-sets, sweeps). Chosen by measurement: bench/README.md, "Group commit: lanes".
 */
export const DEFAULT_MAX_IN_FLIGHT = 4;
/**
 * Calls per group: 256 rows × 7 bound values stays far below PostgreSQL's 65,535 bind parameters
 * and MySQL's limit alike, and keeps a statement short.
 */
export const DEFAULT_MAX_GROUP = 256;

interface Pending<I, O> {
  input: I;
  resolve: (output: O) => void;
  reject: (error: unknown) => void;
}

/** Calls `f` so that a synchronous throw becomes a rejection. */
function attempt<T>(f: () => Promise<T>): Promise<T> {
  return new Promise<T>((resolve) => resolve(f()));
}

/**
 * `one` and `many` as one function: each call resolves with exactly its own output (`many`
 * answers in input order) or rejects with its group's (or, after a retry alone, its own) error.
 */
export function grouped<I, O>(
  one: (input: I) => Promise<O>,
  many: (inputs: I[]) => Promise<O[]>,
  { mode, maxInFlight = DEFAULT_MAX_IN_FLIGHT, maxGroup = DEFAULT_MAX_GROUP, retryAlone = true }: GroupOptions,
): (input: I) => Promise<O> {
  if (!Number.isInteger(maxInFlight) || maxInFlight < 1)
    throw new RangeError(`[idem] group commit: maxInFlight must be a positive integer, got ${maxInFlight}`);
  if (!Number.isInteger(maxGroup) || maxGroup < 1)
    throw new RangeError(`[idem] group commit: maxGroup must be a positive integer, got ${maxGroup}`);

  const alone = (call: Pending<I, O>) => attempt(() => one(call.input)).then(call.resolve, call.reject);

  /** Sends `calls` as one group; settles each call; resolves (never rejects) when all are settled. */
  async function send(calls: Pending<I, O>[]): Promise<void> {
    if (calls.length === 1) return alone(calls[0] as Pending<I, O>);
    let outputs: O[];
    try {
      outputs = await attempt(() => many(calls.map((call) => call.input)));
      if (outputs.length !== calls.length)
        throw new Error(`[idem] group commit: ${calls.length} calls were answered with ${outputs.length} results`);
    } catch (error) {
      if (retryAlone) {
        await Promise.all(calls.map(alone));
      } else {
        for (const call of calls) call.reject(error);
      }
      return;
    }
    for (const [i, call] of calls.entries()) call.resolve(outputs[i] as O);
  }

  if (mode === 'tick') {
    let open: Pending<I, O>[] | undefined;
    const flush = () => {
      const calls = open ?? [];
      open = undefined;
      for (let i = 0; i < calls.length; i += maxGroup) void send(calls.slice(i, i + maxGroup));
    };
    return (input) => {
      if (open) return new Promise<O>((resolve, reject) => open?.push({ input, resolve, reject }));
      open = [];
      setImmediate(flush);
      return attempt(() => one(input));
    };
  }

  const queue: Pending<I, O>[] = [];
  let inFlight = 0;
  const drain = () => {
    while (inFlight < maxInFlight && queue.length > 0) {
      inFlight++;
      void send(queue.splice(0, maxGroup)).then(() => {
        inFlight--;
        drain();
      });
    }
  };
  return (input) =>
    new Promise<O>((resolve, reject) => {
      queue.push({ input, resolve, reject });
      drain();
    });
}

/**
 * The bookkeeping of a group's many forms where the dialect cannot answer each request in the
 * statement itself (SQLite, MySQL: PostgreSQL tags each row with its request's index): which
 * requests insert, and which row answers which request. Written once here for every dialect.
 */

/** One string per (scope, key), for matching a group's rows to its requests. */
export const keyOf = (scope: string, key: string): string => `${scope.length}:${scope}${key}`;

/** One string per owner (scope, key, token), for matching a group's completed rows to its completions. */
export const ownerKeyOf = ({ scope, key, token }: ClaimOwner): string => `${keyOf(scope, key)}\u0000${token}`;

/** The live rows a group's read found (or its insert wrote), each with the clock, by {@link keyOf}. */
export function liveByKey(reads: Iterable<LiveRead>): Map<string, LiveRead> {
  const found = new Map<string, LiveRead>();
  for (const live of reads) found.set(keyOf(live.row.scope, live.row.key), live);
  return found;
}

/**
 * A group's first step, planned over the live rows its read `found`: the `misses` to insert
 * (one request per missing key, the first: the winner), and the answer to every request once
 * the insert `wrote` its rows. A request that is not `admitted` (the dialect refuses it alone)
 * and a row no longer readable answer undefined: the store reads again and decides alone. Of a
 * key twice in the group, the winner inserted and the others find its row live; a row holding
 * the winner's token is its own (tokens are never shared), any other row is someone else's.
 */
export function planClaims(
  requests: readonly ClaimRequest[],
  found: ReadonlyMap<string, LiveRead>,
  admitted: (request: ClaimRequest) => boolean = () => true,
): { misses: ClaimRequest[]; answer(wrote: ReadonlyMap<string, LiveRead>): Array<FirstStep | undefined> } {
  const misses = new Map<string, ClaimRequest>();
  const winners = new Set<number>();
  for (const [i, request] of requests.entries()) {
    const id = keyOf(request.scope, request.key);
    if (!admitted(request) || found.has(id) || misses.has(id)) continue;
    misses.set(id, request);
    winners.add(i);
  }
  return {
    misses: [...misses.values()],
    answer: (wrote) =>
      requests.map((request, i): FirstStep | undefined => {
        if (!admitted(request)) return undefined;
        const id = keyOf(request.scope, request.key);
        const live = found.get(id);
        if (live) return { live };
        const mine = wrote.get(id);
        if (!mine) return undefined;
        return winners.has(i) && mine.row.token === request.token ? { inserted: mine.row } : { live: mine };
      }),
  };
}

/**
 * The answer to each completion of a group, in input order, from the owners the statement
 * `completed`: true where that owner's claim was completed. A completion twice in the group
 * completed the row once: the first answers true, a later one finds it done (false).
 */
export function answerCompletions(completions: readonly ClaimOwner[], completed: Iterable<ClaimOwner>): boolean[] {
  const done = new Set<string>();
  for (const owner of completed) done.add(ownerKeyOf(owner));
  return completions.map((owner) => done.delete(ownerKeyOf(owner)));
}
