/** E3w: how a duplicate that finds its key in progress waits for the outcome: its back-off and its limit. */
import { toMilliseconds, type Duration } from './duration.js';
import type { IdempotencyStore } from './store.js';

/** E3w: the back-off of a waiting duplicate: its first ask again, and the longest pause between two. */
export const FIRST_WAIT_POLL_MS = 25;
export const MAX_WAIT_POLL_MS = 500;

/** E3w: `wait` in milliseconds; 0 (or `'0s'`…) for no wait. */
export function waitMilliseconds(wait: Duration): number {
  return wait === 0 || (typeof wait === 'string' && /^\s*0+(\.0+)?\s*(ms|s|m|h|d)\s*$/.test(wait))
    ? 0
    : toMilliseconds(wait);
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
}

/**
 * E3w, A1: counts a waiting duplicate in its generation's `waits`, once, as the wait begins. It
 * never rejects: a failed count goes to `onError` (a `storeError`) and the wait goes on.
 */
export async function countWait(
  store: IdempotencyStore,
  target: { scope: string; key: string; generation: number },
  onError: (error: unknown) => void,
): Promise<void> {
  try {
    await store.countWait(target);
  } catch (error) {
    onError(error);
  }
}
