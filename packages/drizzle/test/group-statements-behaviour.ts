/**
 * Group commit's statements on a dialect (`claimOrReadMany`, `completeMany`), for the SQLite and
 * MySQL test files: a group writes what its requests written one at a time would (E1, R1), a key
 * twice in a group has one winner (E1), keys already stored come back live (E2), and a stale
 * token fails alone in a group of completions (E6).
 */
import { randomUUID } from 'node:crypto';
import type { ClaimRequest } from '@idem/core/store';
import { expect, it } from 'vitest';
import type { FirstStep, StoreStatements } from '../src/store-statements.ts';

/** A fresh claim of `key` in the scope `group`. */
export const request = (key: string = randomUUID(), token: string = randomUUID()): ClaimRequest => ({
  scope: 'group',
  key,
  fingerprint: `fp-${key}`,
  token,
  leaseMs: 60_000,
  retentionMs: 3_600_000,
  expiredReuse: 'execute',
});
export const outcome = (i: number) => ({ kind: 'success' as const, status: 200 + (i % 3), body: `{"i":${i}}` });

export function inserted(step: FirstStep | undefined) {
  if (!step || !('inserted' in step)) throw new Error(`expected an inserted row, got ${JSON.stringify(step)}`);
  return step.inserted;
}
export function live(step: FirstStep | undefined) {
  if (!step || !('live' in step)) throw new Error(`expected a live row, got ${JSON.stringify(step)}`);
  return step.live;
}
/** A row without the columns the database clock writes. */
export const timeless = ({ createdAt, leaseUntil, expiresAt, completedAt, ...row }: Record<string, unknown>) => row;

/** Registers the shared tests; `open` gives a fresh, migrated database's statements each time. */
export function groupStatementsBehaviour(open: () => Promise<{ statements: StoreStatements }>): void {
  it('E1: a group writes the same rows as one request at a time', async () => {
    const grouped = await open();
    const alone = await open();
    const requests = Array.from({ length: 16 }, () => request());
    const groupSteps = await grouped.statements.claimOrReadMany!(requests);
    const aloneSteps = await Promise.all(requests.map((r) => alone.statements.claimOrRead(r)));
    expect(groupSteps.map((step) => timeless(inserted(step)))).toEqual(
      aloneSteps.map((step) => timeless(inserted(step))),
    );
    for (const step of groupSteps) {
      const row = inserted(step);
      expect(row.leaseUntil.getTime() - row.createdAt.getTime()).toBe(60_000);
      expect(row.expiresAt.getTime() - row.createdAt.getTime()).toBe(3_600_000);
    }
    const completions = requests.map((r, i) => ({ scope: r.scope, key: r.key, token: r.token, outcome: outcome(i) }));
    expect(await grouped.statements.completeMany!(completions)).toEqual(completions.map(() => true));
    expect(await Promise.all(completions.map((c) => alone.statements.complete(c)))).toEqual(
      completions.map(() => true),
    );
    for (const r of requests) {
      const [a, b] = await Promise.all([
        grouped.statements.getLive(r.scope, r.key),
        alone.statements.getLive(r.scope, r.key),
      ]);
      expect(timeless(a!)).toEqual(timeless(b!));
      // R1: retention counts from completion, in the group as alone.
      expect(a!.expiresAt.getTime() - a!.completedAt!.getTime()).toBe(3_600_000);
    }
  });

  it('E1: a key twice in one group has exactly one winner; the other sees its live row', async () => {
    const { statements: s } = await open();
    const key = randomUUID();
    const first = request(key);
    const second = request(key);
    const other = request();
    const [a, b, c] = await s.claimOrReadMany!([first, second, other]);
    expect(inserted(a).token).toBe(first.token);
    expect(live(b).row.token).toBe(first.token);
    expect(live(b).row.state).toBe('processing');
    expect(live(b).now.getTime()).toBeGreaterThanOrEqual(inserted(a).createdAt.getTime());
    expect(inserted(c).token).toBe(other.token);
  });

  it('E2: keys already in the table come back as their live rows, with the clock', async () => {
    const { statements: s } = await open();
    const old = request();
    inserted(await s.claimOrRead(old));
    const fresh = request();
    const [a, b] = await s.claimOrReadMany!([request(old.key), fresh]);
    expect(live(a).row.token).toBe(old.token);
    expect(live(a).now).toBeInstanceOf(Date);
    expect(inserted(b).token).toBe(fresh.token);
  });

  it('E6: a stale token inside a group of completions answers false; the others complete', async () => {
    const { statements: s } = await open();
    const requests = Array.from({ length: 8 }, () => request());
    await s.claimOrReadMany!(requests);
    const completions = requests.map((r, i) => ({
      scope: r.scope,
      key: r.key,
      token: i === 3 ? randomUUID() : r.token,
      outcome: outcome(i),
    }));
    expect(await s.completeMany!(completions)).toEqual(completions.map((_, i) => i !== 3));
    expect((await s.getLive('group', requests[3]!.key))?.state).toBe('processing');
    expect((await s.getLive('group', requests[4]!.key))?.state).toBe('completed');
    // The same completion twice in one group: the first completes, the second finds it done.
    const again = request();
    await s.claimOrRead(again);
    const twice = { scope: again.scope, key: again.key, token: again.token, outcome: outcome(1) };
    expect(await s.completeMany!([twice, twice])).toEqual([true, false]);
    // Nothing of the group left to complete.
    expect(await s.completeMany!([twice, { ...twice, token: randomUUID() }])).toEqual([false, false]);
  });
}
