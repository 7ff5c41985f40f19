/**
 * E3w, A1: the count of duplicates that waited for a generation's outcome (`waits`, shown in the
 * key's timeline). One short write per waiting duplicate, unfenced: `waits + 1` on the live row
 * while it is still that generation. Many waiters of one key arrive together (a burst of retries),
 * so with group commit the counts that arrive while one is in flight go as one `waits + n` per
 * generation, on a single lane of the pool: counting never queues behind a row lock once per
 * waiter, nor takes more than one connection from claims and completions.
 */
import type { GenerationRef } from '@idem/core/store';
import { and, eq, sql, type Column, type SQL } from 'drizzle-orm';
import { grouped, type GroupMode } from './group-commit.js';
import type { StoreStatements } from './store-statements.js';

/** The assignment of a count: `count` more waits. */
export function waitsAdded(columns: { waits: Column }, count: SQL) {
  return { waits: sql`${columns.waits} + ${count}` };
}

/** The live row of (scope, key) while it is still generation `generation`. */
export function sameGeneration(
  columns: { scope: Column; key: Column; generation: Column },
  b: { scope: SQL; key: SQL; generation: SQL },
) {
  return and(eq(columns.scope, b.scope), eq(columns.key, b.key), eq(columns.generation, b.generation));
}

const generationId = ({ scope, key, generation }: GenerationRef) => JSON.stringify([scope, key, generation]);

/**
 * The store's `countWait`: grouped when group commit is on (one `waits + n` per generation in the
 * group, one group at a time), one statement per call otherwise.
 */
export function waitCountsOf(
  s: Pick<StoreStatements, 'addWaits'>,
  groupCommit: boolean,
  mode: GroupMode,
): (ref: GenerationRef) => Promise<boolean> {
  const one = (ref: GenerationRef) => s.addWaits(ref, 1);
  if (!groupCommit) return one;
  return grouped(
    one,
    async (refs) => {
      const counts = new Map<string, { ref: GenerationRef; count: number }>();
      for (const ref of refs) {
        const id = generationId(ref);
        const counted = counts.get(id);
        if (counted) counted.count++;
        else counts.set(id, { ref, count: 1 });
      }
      const added = new Map<string, boolean>();
      for (const [id, { ref, count }] of counts) added.set(id, await s.addWaits(ref, count));
      return refs.map((ref) => added.get(generationId(ref)) === true);
    },
    { mode, maxInFlight: 1 },
  );
}
