/**
 * What the example does beyond the contract (issue 8): the channel deduplicates by a key
 * derived from the request's key, so a re-execution after a lease takeover charges once (E6);
 * atomic mode on PostgreSQL writes the ledger row in idem's transaction; and the configuration
 * that selects them.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDrizzleStore, type DrizzleDatabase } from '@idem/drizzle';
import type { PaymentsStore } from '../src/trpc.ts';
import { openPostgresTarget } from '../../../packages/drizzle/test/pg-target.ts';
import { openSqliteTarget } from '../../../packages/drizzle/test/sqlite-target.ts';
import { ConfigError, readConfig } from '../src/config.ts';
import { ledger, migrateExample, mutate, newKey, sleep, startExample, type RunningExample } from './http.ts';

const PAYMENT = { amount: 4200, currency: 'EUR' };

/** The real store, whose outcome writes fail while `failing` is set, as during a database outage after the handler ran. */
function storeLosingOutcomes(db: DrizzleDatabase) {
  const store = createDrizzleStore(db);
  const state = { failing: true, refused: 0 };
  const wrapped: PaymentsStore = Object.assign(Object.create(store) as PaymentsStore, {
    complete: async (args: Parameters<PaymentsStore['complete']>[0]) => {
      if (state.failing) {
        state.refused++;
        throw new Error('connection terminated unexpectedly');
      }
      return store.complete(args);
    },
  });
  return { store: wrapped, state };
}

const databases = [
  { name: 'SQLite', open: async () => openSqliteTarget() },
  { name: 'PostgreSQL', open: async () => openPostgresTarget({ schemaPrefix: 'idem_downstream' }) },
];

describe.each(databases)('the payments example over $name: derived downstream keys', ({ open }) => {
  let target: Awaited<ReturnType<typeof open>>;
  beforeAll(async () => {
    target = await open();
    await migrateExample(target.db);
  });
  afterAll(async () => {
    await target?.close();
  });

  it('E6/E7: a re-execution after a lease takeover sends the same downstream key, so the channel charges once', async () => {
    const { store, state } = storeLosingOutcomes(target.db);
    const example = await startExample(target.db, { IDEM_LEASE: '1s', IDEM_TTL: '10m' }, { store });
    try {
      const key = newKey();
      const before = (await ledger(example.url)).length;
      const startedAt = Date.now();
      const first = await mutate(example.url, 'payments.create', PAYMENT, { 'idempotency-key': key });
      expect(first.status).toBe(200); // E7: the client learns the real outcome though it was not stored
      const charge = first.body.result.data;
      expect(state.refused).toBeGreaterThanOrEqual(1);

      const during = await mutate(example.url, 'payments.create', PAYMENT, { 'idempotency-key': key });
      expect(during.status).toBe(409); // not handed to a new executor before the lease ends

      await example.app.drain(); // the engine retries the outcome write until the lease ends, then gives up
      state.failing = false;
      await sleep(Math.max(0, startedAt + 1300 - Date.now())); // past the 1 s lease
      const takeover = await mutate(example.url, 'payments.create', PAYMENT, { 'idempotency-key': key });
      expect(takeover.status).toBe(200);
      expect(takeover.headers.get('idempotent-replayed')).toBeNull(); // the handler ran again…
      expect(takeover.body.result.data).toEqual(charge); // …and the channel answered the first charge
      expect(example.events.filter((event) => event.type === 'staleTakeover')).toHaveLength(1);
      const entries = (await ledger(example.url)).slice(before);
      expect(entries.map((entry) => entry.id)).toEqual([charge.id]);

      const replay = await mutate(example.url, 'payments.create', PAYMENT, { 'idempotency-key': key });
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(replay.body.result.data).toEqual(charge);
    } finally {
      await example.close();
    }
  });

  it('R2: a reuse after expiry is a new generation, so its downstream key differs and the channel charges again', async () => {
    const example = await startExample(target.db, { IDEM_TTL: '1s' });
    try {
      const key = newKey();
      const before = (await ledger(example.url)).length;
      const first = await mutate(example.url, 'payments.create', PAYMENT, { 'idempotency-key': key });
      await sleep(1300);
      const second = await mutate(example.url, 'payments.create', PAYMENT, { 'idempotency-key': key });
      expect(second.body.result.data.id).not.toBe(first.body.result.data.id);
      expect((await ledger(example.url)).length - before).toBe(2);
    } finally {
      await example.close();
    }
  });
});

describe('the payments example in atomic mode (PostgreSQL)', () => {
  let target: Awaited<ReturnType<typeof openPostgresTarget>>;
  let example: RunningExample;
  beforeAll(async () => {
    target = await openPostgresTarget({ schemaPrefix: 'idem_atomic_example' });
    await migrateExample(target.db);
    example = await startExample(target.db, { IDEM_TTL: '10m' }, { atomic: true });
  });
  afterAll(async () => {
    await example?.close();
    await target?.close();
  });

  it('E2: the ledger row commits with the claim and the outcome; a replay adds nothing', async () => {
    const key = newKey();
    const before = (await ledger(example.url)).length;
    const first = await mutate(example.url, 'payments.create', PAYMENT, { 'idempotency-key': key });
    const replay = await mutate(example.url, 'payments.create', PAYMENT, { 'idempotency-key': key });
    expect(first.status).toBe(200);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body).toEqual(first.body);
    expect((await ledger(example.url)).slice(before).map((entry) => entry.id)).toEqual([first.body.result.data.id]);
  });

  it('E4: amount 13 fails after writing its ledger row: the row is rolled back with it, the 500 is stored and replayed', async () => {
    const key = newKey();
    const before = (await ledger(example.url)).length;
    const first = await mutate(example.url, 'payments.create', { amount: 13, currency: 'EUR' }, { 'idempotency-key': key });
    const replay = await mutate(example.url, 'payments.create', { amount: 13, currency: 'EUR' }, { 'idempotency-key': key });
    expect(first.status).toBe(500);
    expect(replay.status).toBe(500);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body.error.message).toBe(first.body.error.message);
    expect((await ledger(example.url)).length).toBe(before);
  });
});

describe('configuration of the example', () => {
  it('IDEM_ATOMIC needs PostgreSQL: on SQLite the example refuses to start with a one-line reason', () => {
    expect(() => readConfig({ IDEM_ATOMIC: '1' })).toThrow(ConfigError);
    expect(() => readConfig({ IDEM_ATOMIC: '1' })).toThrow(/IDEM_ATOMIC needs PostgreSQL/);
    expect(readConfig({ IDEM_ATOMIC: 'on', DATABASE_URL: 'postgres://postgres@127.0.0.1:5432/test' }).atomic).toBe(true);
    expect(readConfig({}).atomic).toBe(false);
    expect(() => readConfig({ IDEM_ATOMIC: 'maybe' })).toThrow(/IDEM_ATOMIC must be/);
  });

  it('a relative SQLite path is taken from where npm start was run (INIT_CWD), not from the example folder', () => {
    expect(readConfig({ DATABASE_URL: 'file:data/app.db', INIT_CWD: '/srv/shop' }).database).toEqual({ dialect: 'sqlite', path: '/srv/shop/data/app.db' });
    expect(readConfig({ DATABASE_URL: 'local.sqlite', INIT_CWD: '/srv/shop' }).database).toEqual({ dialect: 'sqlite', path: '/srv/shop/local.sqlite' });
    expect(readConfig({ DATABASE_URL: 'file:/abs/x.db', INIT_CWD: '/srv/shop' }).database).toEqual({ dialect: 'sqlite', path: '/abs/x.db' });
  });
});
