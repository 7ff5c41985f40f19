/**
 * E6: lease renewals, the third write of a running claim beside its claim and its completion. A
 * renewal is a fenced write — the owner's token, still `processing` — that moves `lease_until` to
 * now + the lease on the database clock. With many handlers in flight, the renewals that arrive
 * while earlier ones are in flight go as one statement (group commit), on one lane of the pool:
 * a renewal is due a whole third of a lease ahead, so it never needs to race the fresh path.
 */
import type { ClaimOwner, ClaimRenewal } from '@idem/core/store';
import type { SQL } from 'drizzle-orm';
import type { DatabaseClock } from './database-clock.js';
import { grouped, type GroupMode } from './group-commit.js';
import type { StoreStatements } from './store-statements.js';

/** The assignment of a renewal: the lease runs again from now (the database clock). */
export function renewedLease(clock: DatabaseClock, leaseMs: SQL) {
  return { leaseUntil: clock.after(leaseMs) };
}

const ownerId = ({ scope, key, token }: ClaimOwner) => JSON.stringify([scope, key, token]);

/**
 * A group of renewals, one statement per distinct lease (endpoints mostly share one): `renewSome`
 * renews the claims of `owners` that are still theirs and names those it renewed. Answers, in
 * input order, whether each renewal's claim was renewed (an owner twice in the group: both true).
 */
export async function renewByLease(
  renewals: readonly ClaimRenewal[],
  renewSome: (leaseMs: number, owners: ClaimOwner[]) => Promise<Iterable<ClaimOwner>>,
): Promise<boolean[]> {
  const byLease = new Map<number, Map<string, ClaimOwner>>();
  for (const { leaseMs, scope, key, token } of renewals) {
    const owners = byLease.get(leaseMs) ?? new Map<string, ClaimOwner>();
    owners.set(ownerId({ scope, key, token }), { scope, key, token });
    byLease.set(leaseMs, owners);
  }
  const renewed = new Set<string>();
  for (const [leaseMs, owners] of byLease)
    for (const owner of await renewSome(leaseMs, [...owners.values()])) renewed.add(`${leaseMs}:${ownerId(owner)}`);
  return renewals.map((renewal) => renewed.has(`${renewal.leaseMs}:${ownerId(renewal)}`));
}

/**
 * The store's `renew`: grouped when the dialect has `renewMany` and group commit is on, on a single
 * lane so that renewals never take more than one pool connection from claims and completions.
 */
export function renewalsOf(
  s: Pick<StoreStatements, 'renew' | 'renewMany'>,
  groupCommit: boolean,
  mode: GroupMode,
): (renewal: ClaimRenewal) => Promise<boolean> {
  const { renewMany } = s;
  if (!groupCommit || !renewMany) return (renewal) => s.renew(renewal);
  return grouped((renewal) => s.renew(renewal), renewMany.bind(s), { mode, maxInFlight: 1 });
}
