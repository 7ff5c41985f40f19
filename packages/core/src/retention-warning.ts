/** R1: the warning for a retention shorter than the lease, once per process. */
import { formatDuration } from './duration.js';

/** Each distinct warning once per process: a per-request policy must not warn on every request. */
const warned = new Set<string>();

/**
 * R1: a claim inside its lease never expires, so with a retention shorter than the lease a key
 * can stay claimed (409) for longer than the retention the policy publishes, and clients that
 * bound their retries by it give up too early. Legal, but rarely meant: warned once.
 */
export function warnIfRetentionBelowLease(retentionMs: number, leaseMs: number): void {
  if (retentionMs >= leaseMs) return;
  const message = `[idem] the retention (${formatDuration(retentionMs)}) is shorter than the lease (${formatDuration(leaseMs)}): a claim inside its lease never expires, so a key can stay claimed longer than the retention clients are told to retry within. Set the retention above the lease.`;
  if (warned.has(message)) return;
  warned.add(message);
  process.emitWarning(message, { code: 'IDEM_RETENTION_BELOW_LEASE' });
}
