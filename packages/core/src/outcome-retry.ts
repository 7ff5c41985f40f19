/** E7: an outcome write that failed, retried in the background with back-off until the lease ends. */

/** Calls `attempt` until it succeeds or `deadline` (the lease's end) is near; each failure goes to `onError`. */
export async function retryUntil(
  deadline: number,
  attempt: () => Promise<void>,
  onError: (error: unknown, willRetry: boolean) => void,
): Promise<void> {
  // Back off, but never past the lease: the last attempt lands just before it ends (E7).
  const lastCall = deadline - 25;
  let delay = 50;
  for (;;) {
    const wait = Math.min(delay, lastCall - Date.now());
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait).unref?.());
    try {
      await attempt();
      return;
    } catch (error) {
      delay = Math.min(delay * 2, 2000);
      const willRetry = Date.now() < lastCall;
      onError(error, willRetry);
      if (!willRetry) return;
    }
  }
}
