/**
 * Group commit on each PostgreSQL driver (issue 24), on a real engine: the statements sent for
 * 64 concurrent fresh claims and their completions, outcomes identical to the same run without
 * grouping, duplicates inside one group, and fencing inside one group (E1, E6).
 */
import { randomUUID } from 'node:crypto';
import type { ClaimRequest, ClaimResult } from '@idem/core/store';
import type { Logger } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDrizzleStore, definePgTables, migrate, type DrizzleDatabase } from '../src/index.ts';
import type { AnyPgDatabase } from '../src/dialect.ts';
import { pgStatements } from '../src/pg/statements.ts';
import { DRIVERS, type DriverTarget } from './drivers.ts';

const CONCURRENT = 64;
const outcome = (n: number) => ({ kind: 'success' as const, status: 200, body: JSON.stringify({ n }) });

function request(scope: string, key: string): ClaimRequest {
  return {
    scope,
    key,
    fingerprint: 'fp',
    token: randomUUID(),
    leaseMs: 60_000,
    retentionMs: 3_600_000,
    expiredReuse: 'execute',
  };
}

/** A second drizzle instance over the same connections as `db`, counting the statements it sends. */
async function counting(driver: string, db: DrizzleDatabase) {
  const counter = { statements: 0 };
  const logger: Logger = { logQuery: () => void counter.statements++ };
  const client = (db as unknown as { $client: unknown }).$client;
  const module =
    driver === 'node-postgres'
      ? await import('drizzle-orm/node-postgres')
      : driver === 'postgres-js'
        ? await import('drizzle-orm/postgres-js')
        : await import('drizzle-orm/pglite');
  const logged = (module.drizzle as (config: { client: unknown; logger: Logger }) => DrizzleDatabase)({
    client,
    logger,
  });
  return { db: logged, counter };
}

/** What a claim answered, without the fields that differ from run to run (tokens, clocks). */
function shape(result: ClaimResult) {
  const { record } = result;
  return {
    outcome: result.outcome,
    state: record.state,
    generation: record.generation,
    fingerprint: record.fingerprint,
    takeovers: record.takeovers,
    outcome_: record.outcome,
  };
}

for (const spec of DRIVERS.filter((each) => each.dialect === 'postgres')) {
  describe.skipIf(!spec.runs)(`group commit on ${spec.name}`, () => {
    let target: DriverTarget;
    beforeAll(async () => {
      target = await spec.open();
      await migrate(target.db);
    });
    afterAll(() => target?.close());

    /** 64 concurrent fresh claims, then their completions, then a replay of each: statements and answers. */
    async function run(groupCommit: boolean) {
      const { db, counter } = await counting(spec.name, target.db);
      const store = createDrizzleStore(db, { groupCommit });
      await store.ping(); // warm a connection
      const scope = `group-${groupCommit}-${randomUUID()}`;
      const requests = Array.from({ length: CONCURRENT }, (_, i) => request(scope, `k${i}`));
      counter.statements = 0;
      const claims = await Promise.all(requests.map((r) => store.claim(r)));
      const claimStatements = counter.statements;
      counter.statements = 0;
      const completions = await Promise.all(
        requests.map((r, i) => store.complete({ scope, key: r.key, token: r.token, outcome: outcome(i) })),
      );
      const completeStatements = counter.statements;
      const replays = await Promise.all(requests.map((r) => store.claim({ ...r, token: randomUUID() })));
      return {
        claimStatements,
        completeStatements,
        claims: claims.map(shape),
        owners: claims.map((c, i) => c.record.token === requests[i]?.token),
        completions,
        replays: replays.map(shape),
      };
    }

    it(`sends far fewer than ${CONCURRENT} statements for ${CONCURRENT} concurrent fresh claims and their completions, with the answers of groupCommit: false (E1, R1)`, async () => {
      const grouped = await run(true);
      const alone = await run(false);
      console.info(`[idem] group commit, ${spec.name}: statements for ${CONCURRENT} claims / completions`, {
        grouped: [grouped.claimStatements, grouped.completeStatements],
        alone: [alone.claimStatements, alone.completeStatements],
      });
      expect(alone.claimStatements).toBe(CONCURRENT);
      expect(alone.completeStatements).toBe(CONCURRENT);
      expect(grouped.claimStatements).toBeLessThanOrEqual(CONCURRENT / 4);
      expect(grouped.completeStatements).toBeLessThanOrEqual(CONCURRENT / 4);
      expect(grouped.claims.every((c) => c.outcome === 'claimed')).toBe(true);
      expect(grouped.owners.every(Boolean)).toBe(true);
      expect(grouped.completions.every(Boolean)).toBe(true);
      expect(grouped.replays.every((r) => r.outcome === 'existing' && r.state === 'completed')).toBe(true);
      const { claimStatements: _a, completeStatements: _b, ...groupedAnswers } = grouped;
      const { claimStatements: _c, completeStatements: _d, ...aloneAnswers } = alone;
      expect(groupedAnswers).toEqual(aloneAnswers);
    });

    it('E1: a group that committed but whose answer was lost, retried alone, owns its claim (not a 409 on itself)', async () => {
      const s = pgStatements(target.db as AnyPgDatabase, definePgTables());
      const scope = `lost-${randomUUID()}`;
      const [mine, other] = [request(scope, 'a'), request(scope, 'b')];
      // The group's statement commits; its answer never reaches the batcher (a connection lost after the commit).
      await s.claimOrReadMany!([mine, other]);
      const store = createDrizzleStore(target.db);
      const retried = await store.claim(mine);
      expect(retried).toMatchObject({ outcome: 'claimed', record: { token: mine.token, state: 'processing' } });
      // Anyone else's request for that key still finds the claim in progress.
      expect(await store.claim({ ...mine, token: randomUUID() })).toMatchObject({ outcome: 'existing' });
    });

    it('E1: a key claimed twice inside one group is inserted once; the duplicate comes back undefined, and a key that exists comes back live', async () => {
      const s = pgStatements(target.db as AnyPgDatabase, definePgTables());
      const scope = `dup-${randomUUID()}`;
      const existing = request(scope, 'existing');
      await s.insertClaim(existing);
      const first = request(scope, 'new');
      const duplicate = request(scope, 'new');
      const other = request(scope, 'other');
      const steps = await s.claimOrReadMany!([first, duplicate, request(scope, 'existing'), other]);
      expect(
        steps.map((step) => (step === undefined ? 'undefined' : 'inserted' in step ? 'inserted' : 'live')),
      ).toEqual(['inserted', 'undefined', 'live', 'inserted']);
      const [a, , live, d] = steps;
      expect(a && 'inserted' in a && a.inserted.token).toBe(first.token);
      expect(d && 'inserted' in d && d.inserted.token).toBe(other.token);
      expect(live && 'live' in live && live.live.row.token).toBe(existing.token);
      expect(live && 'live' in live && live.live.now).toBeInstanceOf(Date);
      expect((await s.getLive(scope, 'new'))?.token).toBe(first.token);
    });

    it(`E1: exactly one winner per key among ${CONCURRENT} concurrent claims of 8 keys (duplicates inside groups)`, async () => {
      const store = createDrizzleStore(target.db);
      const scope = `dups-${randomUUID()}`;
      const requests = Array.from({ length: CONCURRENT }, (_, i) => request(scope, `k${i % 8}`));
      const results = await Promise.all(requests.map((r) => store.claim(r)));
      for (let k = 0; k < 8; k++) {
        const mine = results.filter((_, i) => i % 8 === k);
        const winners = mine.filter((r) => r.outcome === 'claimed');
        expect(winners).toHaveLength(1);
        const owner = winners[0]?.record.token;
        expect(mine.every((r) => r.record.token === owner)).toBe(true);
        expect(mine.filter((r) => r.outcome === 'existing')).toHaveLength(7);
      }
    });

    it('E1: two groups of the same keys in opposite orders, at once, never deadlock (rows are inserted in key order)', async () => {
      const s = pgStatements(target.db as AnyPgDatabase, definePgTables());
      for (let round = 0; round < 20; round++) {
        const scope = `order-${randomUUID()}`;
        const keys = Array.from({ length: 50 }, (_, i) => `k${String(i).padStart(2, '0')}`);
        const forward = keys.map((key) => request(scope, key));
        const backward = [...keys].reverse().map((key) => request(scope, key));
        const [a, b] = await Promise.all([s.claimOrReadMany!(forward), s.claimOrReadMany!(backward)]);
        // Each key has one owner: whichever group inserted it; the other saw it or must read again.
        const inserted = [...a, ...b].filter((step) => step && 'inserted' in step).length;
        expect(inserted).toBe(keys.length);
      }
    });

    it('F1/E1: inside one group, a claim of an existing key with another fingerprint finds that record, and the fresh claims beside it are claimed', async () => {
      const store = createDrizzleStore(target.db);
      const scope = `mismatch-${randomUUID()}`;
      const first = request(scope, 'taken');
      expect((await store.claim(first)).outcome).toBe('claimed');
      const requests = Array.from({ length: 16 }, (_, i) =>
        i === 11 ? { ...request(scope, 'taken'), fingerprint: 'other' } : request(scope, `k${i}`),
      );
      const results = await Promise.all(requests.map((r) => store.claim(r)));
      expect(results.map((r) => r.outcome)).toEqual(requests.map((_, i) => (i === 11 ? 'existing' : 'claimed')));
      expect(results[11]?.record).toMatchObject({ token: first.token, fingerprint: 'fp', state: 'processing' });
    });

    it('E6: inside one group, a completion by a stale token returns false while the others return true', async () => {
      const s = pgStatements(target.db as AnyPgDatabase, definePgTables());
      const scope = `fence-${randomUUID()}`;
      const owners = [request(scope, 'a'), request(scope, 'b'), request(scope, 'c')];
      for (const owner of owners) await s.insertClaim(owner);
      const done = await s.completeMany!([
        { scope, key: 'a', token: owners[0]!.token, outcome: outcome(1) },
        { scope, key: 'b', token: randomUUID(), outcome: outcome(2) },
        { scope, key: 'c', token: owners[2]!.token, outcome: outcome(3) },
        { scope, key: 'missing', token: randomUUID(), outcome: outcome(4) },
      ]);
      expect(done).toEqual([true, false, true, false]);
      expect((await s.getLive(scope, 'a'))?.body).toBe(outcome(1).body);
      expect((await s.getLive(scope, 'b'))?.state).toBe('processing');
      const c = await s.getLive(scope, 'c');
      expect([c?.state, c?.outcomeKind, c?.outcomeStatus, c?.body]).toEqual([
        'completed',
        'success',
        200,
        outcome(3).body,
      ]);
      // R1: retention counts from completion.
      expect(c!.expiresAt.getTime() - c!.completedAt!.getTime()).toBe(3_600_000);
    });

    it('E5: a group that fails is retried one request at a time: the poisoned claim rejects alone, the others claim, none is half-claimed', async () => {
      const { db, counter } = await counting(spec.name, target.db);
      const store = createDrizzleStore(db);
      const scope = `poison-${randomUUID()}`;
      const requests = Array.from({ length: 24 }, (_, i) => request(scope, `k${i}`));
      // PostgreSQL refuses a NUL character in text: the statement carrying this row fails.
      const poisoned = 13;
      requests[poisoned] = { ...requests[poisoned]!, fingerprint: 'bad\u0000fingerprint' };
      counter.statements = 0;
      const results = await Promise.allSettled(requests.map((r) => store.claim(r)));
      expect(results.map((r) => r.status)).toEqual(requests.map((_, i) => (i === poisoned ? 'rejected' : 'fulfilled')));
      for (const [i, result] of results.entries()) {
        if (i !== poisoned && result.status === 'fulfilled') expect(result.value.outcome).toBe('claimed');
      }
      // The poisoned claim wrote nothing; a group, its failure and the retries alone were sent.
      expect(await store.get(scope, `k${poisoned}`)).toBeNull();
      expect(counter.statements).toBeGreaterThan(requests.length);
    });

    it('E6: through the store, concurrent completions of which one is stale: only that one returns false', async () => {
      const store = createDrizzleStore(target.db);
      const scope = `fence-store-${randomUUID()}`;
      const requests = Array.from({ length: 16 }, (_, i) => request(scope, `k${i}`));
      await Promise.all(requests.map((r) => store.claim(r)));
      const done = await Promise.all(
        requests.map((r, i) =>
          store.complete({ scope, key: r.key, token: i === 9 ? randomUUID() : r.token, outcome: outcome(i) }),
        ),
      );
      expect(done).toEqual(requests.map((_, i) => i !== 9));
    });
  });
}
