/**
 * E6: the lease of a running claim, kept alive by its owner. While a handler runs, its claim's
 * lease is renewed every third of the lease (a fenced write, `store.renew`), so a slow owner is
 * never taken for a dead one; only a claim whose owner stopped renewing — the process died, lost
 * its store, or its event loop stalled past the lease — is taken over. When a renewal finds the
 * claim fenced, or the store has been unreachable for longer than the lease, the claim's
 * `signal` aborts with a {@link LeaseLostError}.
 */
import type { ClaimOwner, IdempotencyStore } from './store.js';

/** Why a claim's signal aborted: its claim was `fenced` (taken over or gone), or the store `unreachable` past the lease. */
export type LeaseLossReason = 'fenced' | 'unreachable';

/**
 * The reason of an aborted `claim.signal` (E6): this execution no longer owns its claim, or can no
 * longer tell. Its completion will be refused (fenced) if another owner took the claim over; stop
 * work that has not happened yet.
 */
export class LeaseLostError extends Error {
  readonly code = 'idempotency_lease_lost';
  constructor(
    readonly reason: LeaseLossReason,
    options?: { cause?: unknown },
  ) {
    super(
      reason === 'fenced'
        ? '[idem] this claim was taken over by another execution (its lease was not renewed in time)'
        : '[idem] the store was unreachable for longer than the lease: this claim may be taken over',
      options,
    );
    this.name = 'LeaseLostError';
  }
}

export interface KeepLeaseOptions {
  store: Pick<IdempotencyStore, 'renew'>;
  owner: ClaimOwner;
  leaseMs: number;
  /** Called once, when the lease is lost (before the signal aborts). */
  onLost?: (error: LeaseLostError) => void;
  /** Called for each renewal the store failed (it is tried again until the lease would pass). */
  onRenewError?: (error: unknown) => void;
}

/** A kept lease: its signal, and `stop()` (call it once the handler settled; idempotent). */
export interface KeptLease {
  readonly signal: AbortSignal;
  /** When the last renewal the store accepted was sent (epoch ms, this process's clock); the claim's time before the first. */
  readonly renewedAt: number;
  stop(): void;
}

/** Renewals per lease: the lease is renewed every third of it. */
export const RENEWALS_PER_LEASE = 3;

/**
 * Starts renewing `owner`'s claim every third of `leaseMs` until `stop()`. One renewal at a time;
 * the timer is unref'd (a pending renewal never keeps a process alive) and always cleared.
 */
export function keepLease({ store, owner, leaseMs, onLost, onRenewError }: KeepLeaseOptions): KeptLease {
  const controller = new AbortController();
  const interval = Math.max(1, Math.floor(leaseMs / RENEWALS_PER_LEASE));
  let timer: ReturnType<typeof setTimeout> | undefined;
  let stopped = false;
  // The lease runs from the last renewal the store accepted; before the first, from the claim.
  let renewedAt = Date.now();

  const lose = (error: LeaseLostError) => {
    if (stopped) return;
    stopped = true;
    try {
      onLost?.(error);
    } finally {
      controller.abort(error);
    }
  };

  const schedule = (delay: number) => {
    if (stopped) return;
    timer = setTimeout(renew, delay);
    timer.unref?.();
  };

  async function renew(): Promise<void> {
    timer = undefined;
    if (stopped) return;
    const sentAt = Date.now();
    try {
      const owned = await store.renew({ ...owner, leaseMs });
      if (stopped) return;
      if (!owned) return lose(new LeaseLostError('fenced'));
      renewedAt = sentAt;
      schedule(interval);
    } catch (error) {
      if (stopped) return;
      onRenewError?.(error);
      if (Date.now() - renewedAt >= leaseMs) return lose(new LeaseLostError('unreachable', { cause: error }));
      // Try again sooner, but never later than the lease allows.
      schedule(Math.min(Math.max(1, Math.floor(interval / 2)), Math.max(1, renewedAt + leaseMs - Date.now())));
    }
  }

  schedule(interval);
  return {
    signal: controller.signal,
    get renewedAt() {
      return renewedAt;
    },
    stop() {
      stopped = true;
      if (timer !== undefined) clearTimeout(timer);
      timer = undefined;
    },
  };
}

/** A signal that never aborts: the claim of an execution whose lease is held otherwise (atomic mode's transaction). */
export function neverAborted(): AbortSignal {
  return new AbortController().signal;
}
