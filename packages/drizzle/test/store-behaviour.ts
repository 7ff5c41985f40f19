/**
 * Behaviour of the drizzle store beyond the core conformance suite, run against each dialect:
 * what lands in the tables (history rows, bodies, tombstones), the sweeper's batches, purge's
 * horizon, migrations, table names. Each dialect's test file supplies a harness.
 */
import { randomUUID } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { sql, type SQL } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { IdempotencyStore } from '@idem/core';
import type { ClaimRequest, ClaimResult } from '@idem/core/store';
import { fileURLToPath } from 'node:url';
import { createDrizzleStore, migrate, sweepAll, type DrizzleDatabase, type DrizzleStore } from '../src/index.ts';
import { migrationsFor } from '../src/migration-files.ts';
import { stepsBehaviour } from './steps-behaviour.ts';

export interface StoreHarness {
  dialect: 'sqlite' | 'postgres' | 'mysql';
  /** The driver, as `createDrizzleStore` names it. */
  driver: string;
  db: DrizzleDatabase;
  /** Runs a query and returns its rows as the driver gives them. */
  rows<T>(query: SQL): Promise<T[]>;
  /** Runs one DDL statement. */
  exec(statement: string): Promise<void>;
  close(): Promise<void>;
}

/** `key` is a reserved word in MySQL: raw queries name the column quoted, in each dialect's quotes. */
const keyColumn = sql.identifier('key');

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export function claimed(result: ClaimResult) {
  if (result.outcome !== 'claimed') throw new Error(`expected claimed, got ${result.outcome}`);
  return result;
}

/** How far the application's `Date` is moved back in the database-clock tests: a year. */
export const APPLICATION_CLOCK_SHIFT_MS = 365 * 24 * 3_600_000;

const unused = { scope: 'unreachable', key: 'k', token: 't' };
const outcome = { kind: 'success', status: 200, body: '1' } as const;

/** One call of each method of a drizzle store, on a key nobody uses. */
const EVERY_CALL: Record<string, (store: DrizzleStore) => Promise<unknown>> = {
  claim: (store) => store.claim({ ...unused, fingerprint: null, leaseMs: 1, retentionMs: 1, expiredReuse: 'execute' }),
  transaction: (store) =>
    store.transaction!(async (t) => {
      await t.insertClaim({ ...unused, fingerprint: null, leaseMs: 1, retentionMs: 1, expiredReuse: 'execute' });
      return { commit: false, value: 1 };
    }),
  complete: (store) => store.complete({ ...unused, outcome }),
  saveStep: (store) => store.saveStep({ ...unused, name: 'step', result: '1' }),
  release: (store) => store.release(unused),
  renew: (store) => store.renew({ ...unused, leaseMs: 1 }),
  countWait: (store) => store.countWait({ scope: unused.scope, key: unused.key, generation: 1 }),
  get: (store) => store.get(unused.scope, unused.key),
  timeline: (store) => store.timeline(unused.scope, unused.key),
  sweep: (store) => store.sweep(),
  purge: (store) => store.purge({ olderThanMs: 0 }),
  sweepExclusive: (store) => store.sweepExclusive(),
  ping: (store) => store.ping(),
};

/**
 * E5: calls every method of `store`, whose database cannot be reached, and expects each to
 * answer a rejected promise: none throws synchronously, none resolves. The list of calls must
 * name every method the store has, so that a new method cannot be left out.
 */
export async function expectEveryMethodToReject(store: DrizzleStore): Promise<void> {
  const methods = Object.keys(store).filter(
    (name) => typeof (store as unknown as Record<string, unknown>)[name] === 'function',
  );
  // Atomic mode's `transaction` is there on every driver but better-sqlite3.
  const calls = Object.keys(EVERY_CALL).filter((name) => name !== 'transaction' || store.transaction);
  expect(calls.sort(), 'a call for every method of the store').toEqual(methods.sort());
  const answers: Record<string, string> = {};
  for (const name of calls) {
    const call = EVERY_CALL[name]!;
    try {
      const answer = call(store);
      answers[name] = await answer.then(
        (value) => `resolved ${JSON.stringify(value)}`,
        (error: unknown) => (error instanceof Error ? 'rejected' : `rejected with a non-error ${String(error)}`),
      );
    } catch (error) {
      answers[name] = `threw synchronously: ${String(error)}`;
    }
  }
  expect(answers).toEqual(Object.fromEntries(calls.map((name) => [name, 'rejected'])));
}

export function describeStoreBehaviour(name: string, open: () => Promise<StoreHarness>): void {
  describe(`drizzle store behaviour: ${name}`, () => {
    let harness: StoreHarness;
    let store: DrizzleStore;
    const scope = `behaviour/${randomUUID()}`;
    const request = (overrides: Partial<ClaimRequest> = {}): ClaimRequest => ({
      scope,
      key: randomUUID(),
      fingerprint: 'fp-1',
      token: randomUUID(),
      leaseMs: 30_000,
      retentionMs: 60_000,
      expiredReuse: 'execute',
      ...overrides,
    });
    /** A key whose generation 1 completed with `body` and whose retention has already passed. */
    const expiredKey = async (body = '{"charge":1}', target: IdempotencyStore = store) => {
      const first = request({ retentionMs: 1, leaseMs: 1 });
      claimed(await target.claim(first));
      expect(
        await target.complete({
          scope,
          key: first.key,
          token: first.token,
          outcome: { kind: 'success', status: 201, body },
        }),
      ).toBe(true);
      await sleep(15);
      return first;
    };
    const count = async (query: SQL) => Number((await harness.rows<{ n: number | string }>(query))[0]?.n);

    beforeAll(async () => {
      harness = await open();
      await migrate(harness.db);
      store = createDrizzleStore(harness.db);
    });
    afterAll(async () => {
      await harness?.close();
    });

    stepsBehaviour(() => ({ harness, store }));

    it('detects its dialect and driver from the drizzle instance', () => {
      expect(store.dialect).toBe(harness.dialect);
      expect(store.driver).toBe(harness.driver);
      expect(store.tables).toEqual({ keys: 'idem_keys', history: 'idem_key_history' });
    });

    it('migrate() run again is harmless: each migration is recorded once and data survives', async () => {
      const req = request();
      claimed(await store.claim(req));
      await migrate(harness.db);
      await migrate(harness.db);
      expect(await count(sql`SELECT count(*) AS n FROM ${sql.identifier('__idem_migrations')}`)).toBe(
        migrationsFor(harness.dialect).length,
      );
      expect((await store.get(scope, req.key))?.token).toBe(req.token);
    });

    it('E2: a body round-trips byte-identical through a text column (key order, unicode, escapes, 1 MB)', async () => {
      const bodies = [
        '{"z":1,"a":{"é":"✓ 日本 🧾","b":[3,1,2]},"m":null,"n":-0.0,"big":12345678901234567890}',
        '{"quote":"\\"","backslash":"\\\\","nul":"\\u0000","tab":"\\t","lone":"\\ud800"}',
        `{"blob":"${'x'.repeat(1_000_000)}"}`,
        '',
      ];
      for (const body of bodies) {
        const req = request();
        claimed(await store.claim(req));
        expect(
          await store.complete({
            scope,
            key: req.key,
            token: req.token,
            outcome: { kind: 'success', status: 200, body },
          }),
        ).toBe(true);
        expect((await store.get(scope, req.key))?.outcome?.body).toBe(body);
        const [raw] = await harness.rows<{ body: string }>(
          sql`SELECT body FROM idem_keys WHERE scope = ${scope} AND ${keyColumn} = ${req.key}`,
        );
        expect(raw?.body).toBe(body);
      }
    });

    it('R2: reusing an expired key copies generation 1 into history without its body and makes the live row generation 2', async () => {
      const first = await expiredKey('{"charge":1}');
      const reuse = claimed(await store.claim(request({ key: first.key, fingerprint: 'fp-2' })));
      expect(reuse.record).toMatchObject({
        generation: 2,
        state: 'processing',
        fingerprint: 'fp-2',
        takeovers: 0,
        outcome: null,
        completedAt: null,
      });
      expect(reuse.expired).toMatchObject({
        generation: 1,
        state: 'archived',
        token: first.token,
        outcome: { kind: 'success', status: 201, body: null },
      });

      const history = await harness.rows<{
        generation: number;
        body: string | null;
        outcome_status: number;
        reused_at: unknown;
        archived_at: unknown;
      }>(
        sql`SELECT generation, body, outcome_status, reused_at, archived_at FROM idem_key_history WHERE scope = ${scope} AND ${keyColumn} = ${first.key}`,
      );
      expect(history).toHaveLength(1);
      expect(history[0]).toMatchObject({ generation: 1, body: null, outcome_status: 201 });
      expect(history[0]?.reused_at).not.toBeNull();
      expect(history[0]?.archived_at).not.toBeNull();

      const timeline = await store.timeline(scope, first.key);
      expect(timeline.map((entry) => [entry.generation, entry.state, entry.status])).toEqual([
        [1, 'archived', 201],
        [2, 'processing', null],
      ]);
      expect(timeline[0]!.reusedAt!.getTime()).toBeLessThanOrEqual(timeline[1]!.firstSeenAt.getTime());
      expect(timeline[0]!.firstSeenAt.getTime()).toBeLessThan(timeline[0]!.expiresAt.getTime());
    });

    it('R2: of 20 concurrent reuses of an expired key exactly one writes generation 2 and one history row', async () => {
      const first = await expiredKey();
      const results = await Promise.all(Array.from({ length: 20 }, () => store.claim(request({ key: first.key }))));
      expect(results.filter((result) => result.outcome === 'claimed')).toHaveLength(1);
      expect(
        await count(
          sql`SELECT count(*) AS n FROM idem_key_history WHERE scope = ${scope} AND ${keyColumn} = ${first.key}`,
        ),
      ).toBe(1);
      expect((await store.get(scope, first.key))?.generation).toBe(2);
    });

    it('R2: each expiry adds a generation: three uses make a timeline of three, oldest first', async () => {
      const first = await expiredKey();
      const second = request({ key: first.key, retentionMs: 1 });
      claimed(await store.claim(second));
      await store.complete({
        scope,
        key: first.key,
        token: second.token,
        outcome: { kind: 'error', status: 500, body: '{"e":1}' },
      });
      await sleep(15);
      claimed(await store.claim(request({ key: first.key })));
      const timeline = await store.timeline(scope, first.key);
      expect(timeline.map((entry) => [entry.generation, entry.outcomeKind, entry.status])).toEqual([
        [1, 'success', 201],
        [2, 'error', 500],
        [3, null, null],
      ]);
      expect(timeline.map((entry) => entry.reusedAt === null)).toEqual([false, false, true]);
    });

    it('R3: sweep archives expired rows in place in batches; sweepAll drains the rest; live and fresh rows stay', async () => {
      await sweepAll(store);
      const expired = await Promise.all(Array.from({ length: 5 }, () => expiredKey('{"secret":true}')));
      const fresh = request();
      claimed(await store.claim(fresh));
      expect(await store.sweep({ batchSize: 2 })).toEqual({ archived: 2 });
      expect(await sweepAll(store, { batchSize: 2 })).toMatchObject({ archived: 3, batches: 2, stopped: 'done' });
      expect(await store.sweep()).toEqual({ archived: 0 });
      for (const { key } of expired) {
        const [row] = await harness.rows<{
          state: string;
          body: string | null;
          outcome_status: number;
          fingerprint: string;
        }>(
          sql`SELECT state, body, outcome_status, fingerprint FROM idem_keys WHERE scope = ${scope} AND ${keyColumn} = ${key}`,
        );
        expect(row).toEqual({ state: 'archived', body: null, outcome_status: 201, fingerprint: 'fp-1' });
      }
      expect((await store.get(scope, fresh.key))?.state).toBe('processing');
    });

    it('R2/R3: a key archived by the sweeper is reused as the next generation and history keeps the sweep time', async () => {
      await sweepAll(store);
      const first = await expiredKey();
      expect((await store.sweep()).archived).toBe(1);
      const swept = await store.get(scope, first.key);
      const reuse = claimed(await store.claim(request({ key: first.key })));
      expect(reuse.record.generation).toBe(2);
      expect(reuse.expired?.archivedAt?.getTime()).toBe(swept?.archivedAt?.getTime());
    });

    it('R2: with expiredReuse reject nothing is written to history', async () => {
      const first = await expiredKey();
      const answer = await store.claim(request({ key: first.key, expiredReuse: 'reject' }));
      expect(answer).toMatchObject({ outcome: 'existing', expired: true, record: { generation: 1 } });
      expect(
        await count(
          sql`SELECT count(*) AS n FROM idem_key_history WHERE scope = ${scope} AND ${keyColumn} = ${first.key}`,
        ),
      ).toBe(0);
    });

    it('R3: purge honours the horizon: archived tombstones and history rows go, live generations stay', async () => {
      const reused = await expiredKey();
      claimed(await store.claim(request({ key: reused.key })));
      const tombstone = await expiredKey();
      await sweepAll(store);
      expect(await store.purge({ olderThanMs: 3_600_000 })).toMatchObject({ deleted: 0, stopped: 'done' });
      expect(await store.timeline(scope, reused.key)).toHaveLength(2);
      await sleep(30);
      expect((await store.purge({ olderThanMs: 10 })).deleted).toBeGreaterThanOrEqual(2);
      expect((await store.timeline(scope, reused.key)).map((entry) => entry.generation)).toEqual([2]);
      expect(await store.get(scope, tombstone.key)).toBeNull();
      expect(await store.timeline(scope, tombstone.key)).toEqual([]);
      // A purged key is new again.
      expect(claimed(await store.claim(request({ key: tombstone.key }))).record.generation).toBe(1);
    });

    it('rejects a negative purge horizon and a zero sweep batch', async () => {
      await expect(store.purge({ olderThanMs: -1 })).rejects.toThrow(/\[idem\]/);
      await expect(store.sweep({ batchSize: 0 })).rejects.toThrow(/\[idem\]/);
    });

    it('S1: uses the table names it is given', async () => {
      const folder = fileURLToPath(new URL(`../migrations/${harness.dialect}`, import.meta.url));
      for (const file of readdirSync(folder)
        .filter((name) => name.endsWith('.sql'))
        .sort()) {
        const script = readFileSync(join(folder, file), 'utf8')
          .replaceAll('idem_key_history', 'audit_history')
          .replaceAll('idem_keys', 'audit_keys');
        for (const statement of script.split('--> statement-breakpoint')) await harness.exec(statement);
      }
      const custom = createDrizzleStore(harness.db, { tables: { keys: 'audit_keys', history: 'audit_history' } });
      const first = await expiredKey('1', custom);
      claimed(await custom.claim(request({ key: first.key })));
      expect((await custom.timeline(scope, first.key)).map((entry) => entry.generation)).toEqual([1, 2]);
      expect(await count(sql`SELECT count(*) AS n FROM audit_history WHERE ${keyColumn} = ${first.key}`)).toBe(1);
      expect(await store.get(scope, first.key)).toBeNull();
    });
  });
}
