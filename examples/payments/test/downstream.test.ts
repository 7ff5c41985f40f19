/**
 * What the example does beyond the contract (issue 8): the channel deduplicates by a key
 * derived from the request's key, so a re-execution after a lease takeover charges once (E6);
 * atomic mode on PostgreSQL writes the ledger row in idem's transaction; and the configuration
 * that selects them.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import type { DrizzleDatabase } from '@idem/drizzle';
import { openPostgresTarget } from '../../../packages/drizzle/test/pg-target.ts';
import { openSqliteTarget } from '../../../packages/drizzle/test/sqlite-target.ts';
import { ConfigError, readConfig } from '../src/config.ts';
import { ledger, migrateExample, mutate, newKey, startExample, type RunningExample } from './http.ts';
import { untilExpired, untilLeaseEnds } from '../../../test/support/waiting.ts';

const PAYMENT = { amount: 4200, currency: 'EUR' };
const SCOPE = 'public/payments.create';

/**
 * A real fault of the outcome write (E7), not a stub: the database itself refuses to mark a
 * record completed, as a read-only failover or a full disk would, while claims still go through.
 */
interface OutcomeFault {
  refuse(): Promise<void>;
  allow(): Promise<void>;
}

const databases: Array<{
  name: string;
  open(): Promise<{ db: DrizzleDatabase; outcomes: OutcomeFault; close(): Promise<void> }>;
}> = [
  {
    name: 'SQLite',
    async open() {
      const target = await openSqliteTarget();
      return {
        db: target.db,
        close: () => target.close(),
        outcomes: {
          refuse: async () =>
            void target.client.exec(
              "CREATE TRIGGER refuse_outcomes BEFORE UPDATE OF state ON idem_keys WHEN NEW.state = 'completed' BEGIN SELECT RAISE(ABORT, 'outcome writes refused'); END",
            ),
          allow: async () => void target.client.exec('DROP TRIGGER IF EXISTS refuse_outcomes'),
        },
      };
    },
  },
  {
    name: 'PostgreSQL',
    async open() {
      const target = await openPostgresTarget({ schemaPrefix: 'idem_downstream' });
      return {
        db: target.db,
        close: () => target.close(),
        outcomes: {
          async refuse() {
            await target.db.execute(
              sql.raw(
                "CREATE FUNCTION refuse_outcomes() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'outcome writes refused'; END $$",
              ),
            );
            await target.db.execute(
              sql.raw(
                "CREATE TRIGGER refuse_outcomes BEFORE UPDATE ON idem_keys FOR EACH ROW WHEN (NEW.state = 'completed') EXECUTE FUNCTION refuse_outcomes()",
              ),
            );
          },
          allow: async () =>
            void (await target.db.execute(sql.raw('DROP FUNCTION IF EXISTS refuse_outcomes() CASCADE'))),
        },
      };
    },
  },
];

describe.each(databases)('the payments example over $name: derived downstream keys', ({ open }) => {
  let target: Awaited<ReturnType<(typeof databases)[number]['open']>>;
  beforeAll(async () => {
    target = await open();
    await migrateExample(target.db);
  });
  afterAll(async () => {
    await target?.close();
  });

  it('E6/E7: the database refuses the outcome write; a re-execution after the lease takeover sends the same downstream key, so the channel charges once', async () => {
    const example = await startExample(target.db, { IDEM_LEASE: '2s', IDEM_TTL: '10m' });
    await target.outcomes.refuse();
    try {
      const key = newKey();
      const before = (await ledger(example.url)).length;
      const first = await mutate(example.url, 'payments.create', PAYMENT, { 'idempotency-key': key });
      expect(first.status).toBe(200); // E7: the client learns the real outcome though it was not stored
      const charge = first.body.result.data;
      expect(
        example.events.filter(
          (event) => event.type === 'storeError' && event.key === key && event.storeOperation === 'complete',
        ).length,
      ).toBeGreaterThanOrEqual(1);
      expect(await example.app.store.get(SCOPE, key)).toMatchObject({ state: 'processing', outcome: null });

      const during = await mutate(example.url, 'payments.create', PAYMENT, { 'idempotency-key': key });
      expect(during.status).toBe(409); // not handed to a new executor before the lease ends

      await example.app.drain(); // the engine retries the outcome write until the lease ends, then gives up
      expect(
        example.events.filter((event) => event.type === 'storeError' && event.key === key && !event.willRetry),
      ).toHaveLength(1);
      await target.outcomes.allow();
      await untilLeaseEnds(example.app.store, SCOPE, key);
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
      await target.outcomes.allow();
      await example.close();
    }
  });

  it('R2: a reuse after expiry is a new generation, so its downstream key differs and the channel charges again', async () => {
    const example = await startExample(target.db, { IDEM_TTL: '1s' });
    try {
      const key = newKey();
      const before = (await ledger(example.url)).length;
      const first = await mutate(example.url, 'payments.create', PAYMENT, { 'idempotency-key': key });
      await untilExpired(example.app.store, SCOPE, key);
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
    const first = await mutate(
      example.url,
      'payments.create',
      { amount: 13, currency: 'EUR' },
      { 'idempotency-key': key },
    );
    const replay = await mutate(
      example.url,
      'payments.create',
      { amount: 13, currency: 'EUR' },
      { 'idempotency-key': key },
    );
    expect(first.status).toBe(500);
    expect(replay.status).toBe(500);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body.error.message).toBe(first.body.error.message);
    expect((await ledger(example.url)).length).toBe(before);
  });
});

describe('configuration of the example', () => {
  it("IDEM_GROUP_COMMIT: on by default, off turns the store's group commit off, anything else is refused", () => {
    expect(readConfig({}).groupCommit).toBe(true);
    expect(readConfig({ IDEM_GROUP_COMMIT: 'off' }).groupCommit).toBe(false);
    expect(readConfig({ IDEM_GROUP_COMMIT: '0' }).groupCommit).toBe(false);
    expect(() => readConfig({ IDEM_GROUP_COMMIT: 'sometimes' })).toThrow(/IDEM_GROUP_COMMIT must be/);
  });

  it('IDEM_ATOMIC needs PostgreSQL: on SQLite the example refuses to start with a one-line reason', () => {
    expect(() => readConfig({ IDEM_ATOMIC: '1' })).toThrow(ConfigError);
    expect(() => readConfig({ IDEM_ATOMIC: '1' })).toThrow(/IDEM_ATOMIC needs PostgreSQL/);
    expect(readConfig({ IDEM_ATOMIC: 'on', DATABASE_URL: 'postgres://postgres@127.0.0.1:5432/test' }).atomic).toBe(
      true,
    );
    expect(readConfig({}).atomic).toBe(false);
    expect(() => readConfig({ IDEM_ATOMIC: 'maybe' })).toThrow(/IDEM_ATOMIC must be/);
  });

  it('E3w: IDEM_WAIT is off by default, a duration turns it on, and it is refused with IDEM_ATOMIC, saying why', () => {
    expect(readConfig({}).waitMs).toBe(0);
    expect(readConfig({ IDEM_WAIT: 'off' }).waitMs).toBe(0);
    expect(readConfig({ IDEM_WAIT: '5s' }).waitMs).toBe(5000);
    expect(() => readConfig({ IDEM_WAIT: 'soon' })).toThrow(/IDEM_WAIT must be a duration/);
    const postgres = 'postgres://postgres@127.0.0.1:5432/test';
    expect(() => readConfig({ IDEM_WAIT: '5s', IDEM_ATOMIC: '1', DATABASE_URL: postgres })).toThrow(ConfigError);
    expect(() => readConfig({ IDEM_WAIT: '5s', IDEM_ATOMIC: '1', DATABASE_URL: postgres })).toThrow(
      /IDEM_WAIT cannot be combined with IDEM_ATOMIC: in atomic mode the first request's claim is invisible/,
    );
    expect(readConfig({ IDEM_WAIT: 'off', IDEM_ATOMIC: '1', DATABASE_URL: postgres }).atomic).toBe(true);
  });

  it('a relative SQLite path is taken from where npm start was run (INIT_CWD), not from the example folder', () => {
    expect(readConfig({ DATABASE_URL: 'file:data/app.db', INIT_CWD: '/srv/shop' }).database).toEqual({
      dialect: 'sqlite',
      path: '/srv/shop/data/app.db',
    });
    expect(readConfig({ DATABASE_URL: 'local.sqlite', INIT_CWD: '/srv/shop' }).database).toEqual({
      dialect: 'sqlite',
      path: '/srv/shop/local.sqlite',
    });
    expect(readConfig({ DATABASE_URL: 'file:/abs/x.db', INIT_CWD: '/srv/shop' }).database).toEqual({
      dialect: 'sqlite',
      path: '/abs/x.db',
    });
  });
});
