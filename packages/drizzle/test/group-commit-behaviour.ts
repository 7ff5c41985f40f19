/**
 * Group commit through the store (`createDrizzleStore`, group commit on by default), for a
 * dialect's test file: what a run of concurrent fresh claims and completions sends, and that
 * its answers are those of `groupCommit: false` (E1, E6, R1).
 */
import { randomUUID } from 'node:crypto';
import type { ClaimRequest, ClaimResult } from '@idem/core/store';
import { expect, it } from 'vitest';
import { createDrizzleStore, type DrizzleDatabase } from '../src/index.ts';

export const CONCURRENT = 64;

export interface CountedDatabase {
  /** A database the tables are migrated on. */
  db: DrizzleDatabase;
  /** What the database has been sent since the last call: statements, or commits (better-sqlite3). */
  sent(): number;
  close(): Promise<void>;
}

const outcome = (n: number) => ({ kind: 'success' as const, status: 200, body: JSON.stringify({ n }) });
const request = (scope: string, key: string): ClaimRequest => ({
  scope,
  key,
  fingerprint: 'fp',
  token: randomUUID(),
  leaseMs: 60_000,
  retentionMs: 3_600_000,
  expiredReuse: 'execute',
});
const shape = ({ outcome: answer, record }: ClaimResult) => ({
  outcome: answer,
  state: record.state,
  generation: record.generation,
  fingerprint: record.fingerprint,
  takeovers: record.takeovers,
  stored: record.outcome,
});

/**
 * The store-level tests. `counted` is what `sent()` counts ("statements", "commits"); `alone` is
 * how many of it one request costs without grouping (claims, completions); `most` the bound
 * the grouped run must stay under.
 */
export function groupCommitThroughTheStore({
  label,
  open,
  counted,
  alone,
  most,
}: {
  label: string;
  open(): Promise<CountedDatabase>;
  counted: string;
  alone: [claim: number, complete: number];
  most: number;
}) {
  async function run(groupCommit: boolean) {
    const target = await open();
    try {
      const store = createDrizzleStore(target.db, { groupCommit });
      await store.ping();
      const scope = 'group';
      const requests = Array.from({ length: CONCURRENT }, (_, i) => request(scope, `k${i}`));
      target.sent();
      const claims = await Promise.all(requests.map((r) => store.claim(r)));
      const claimSent = target.sent();
      const completions = await Promise.all(
        requests.map((r, i) => store.complete({ scope, key: r.key, token: r.token, outcome: outcome(i) })),
      );
      const completeSent = target.sent();
      const replays = await Promise.all(requests.map((r) => store.claim({ ...r, token: randomUUID() })));
      const records = await Promise.all(requests.map((r) => store.get(scope, r.key)));
      return {
        sent: [claimSent, completeSent],
        answers: {
          claims: claims.map(shape),
          owners: claims.map((c, i) => c.record.token === requests[i]?.token),
          completions,
          replays: replays.map(shape),
          retention: records.map((r) => r?.completedAt && r.expiresAt.getTime() - r.completedAt.getTime()),
        },
      };
    } finally {
      await target.close();
    }
  }

  it(`E1: ${CONCURRENT} concurrent fresh claims and their completions cost far fewer ${counted} than ${CONCURRENT}, with the answers of groupCommit: false (${label})`, async () => {
    const grouped = await run(true);
    const single = await run(false);
    console.info(`[idem] group commit, ${label}: ${counted} for ${CONCURRENT} claims / completions`, {
      grouped: grouped.sent,
      alone: single.sent,
    });
    expect(single.sent).toEqual([CONCURRENT * alone[0], CONCURRENT * alone[1]]);
    expect(grouped.sent[0]).toBeLessThanOrEqual(most);
    expect(grouped.sent[1]).toBeLessThanOrEqual(most);
    expect(grouped.answers.claims.every((c) => c.outcome === 'claimed')).toBe(true);
    expect(grouped.answers.owners.every(Boolean)).toBe(true);
    expect(grouped.answers.completions.every(Boolean)).toBe(true);
    expect(grouped.answers.replays.every((r) => r.outcome === 'existing' && r.state === 'completed')).toBe(true);
    expect(grouped.answers.retention.every((ms) => ms === 3_600_000)).toBe(true);
    expect(grouped.answers).toEqual(single.answers);
  });

  it(`E1: exactly one winner per key among ${CONCURRENT} concurrent claims of 8 keys, duplicates inside groups (${label})`, async () => {
    const target = await open();
    try {
      const store = createDrizzleStore(target.db);
      const requests = Array.from({ length: CONCURRENT }, (_, i) => request('dups', `k${i % 8}`));
      const results = await Promise.all(requests.map((r) => store.claim(r)));
      for (let k = 0; k < 8; k++) {
        const mine = results.filter((_, i) => i % 8 === k);
        const winners = mine.filter((r) => r.outcome === 'claimed');
        expect(winners).toHaveLength(1);
        expect(mine.every((r) => r.record.token === winners[0]?.record.token)).toBe(true);
      }
    } finally {
      await target.close();
    }
  });

  it(`E6: concurrent completions of which one carries a stale token: only that one answers false (${label})`, async () => {
    const target = await open();
    try {
      const store = createDrizzleStore(target.db);
      const requests = Array.from({ length: 16 }, (_, i) => request('fence', `k${i}`));
      await Promise.all(requests.map((r) => store.claim(r)));
      const done = await Promise.all(
        requests.map((r, i) =>
          store.complete({ scope: 'fence', key: r.key, token: i === 9 ? randomUUID() : r.token, outcome: outcome(i) }),
        ),
      );
      expect(done).toEqual(requests.map((_, i) => i !== 9));
      expect((await store.get('fence', 'k9'))?.state).toBe('processing');
    } finally {
      await target.close();
    }
  });
}
