/**
 * R3: the scheduled sweeper. Two sweepers over two connections to one database, started at
 * once: one sweeps, the other skips its round (the fleet's lock: `pg_try_advisory_xact_lock`,
 * `GET_LOCK`, a lease row on SQLite); `stop()` waits for the current batch and no later batch
 * runs; the lock is free again afterwards. Batches are held on a gate, never on a timer.
 */
import { randomUUID } from 'node:crypto';
import { drizzle as drizzleMysql } from 'drizzle-orm/mysql2';
import { drizzle as drizzleNodePostgres } from 'drizzle-orm/node-postgres';
import mysql from 'mysql2/promise';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import {
  createDrizzleStore,
  migrate,
  startSweeper,
  sweepAll,
  type DrizzleDatabase,
  type DrizzleStore,
  type SweepRound,
} from '../src/index.ts';
import { mysqlSuitesRun, openMysqlTarget } from './mysql-target.ts';
import { isServerReachable, openPostgresTarget, postgresRequired } from './pg-target.ts';
import { openSqliteConnection, openSqliteTarget } from './sqlite-target.ts';

vi.setConfig({ testTimeout: 60_000 });

/** Two drizzle instances over separate connections to one fresh database. */
interface TwoConnections {
  first: DrizzleDatabase;
  second: DrizzleDatabase;
  close(): Promise<void>;
}

async function sqliteFile(): Promise<TwoConnections> {
  const target = await openSqliteTarget();
  const other = openSqliteConnection(target.file);
  return {
    first: target.db,
    second: other.db,
    async close() {
      other.client.close();
      await target.close();
    },
  };
}

async function postgresSchema(): Promise<TwoConnections> {
  const target = await openPostgresTarget({ max: 4, schemaPrefix: 'idem_sweeper' });
  const pool = new pg.Pool({ connectionString: target.url, max: 4 });
  return {
    first: target.db,
    second: drizzleNodePostgres({ client: pool }),
    async close() {
      await pool.end();
      await target.close();
    },
  };
}

async function mysqlDatabase(): Promise<TwoConnections> {
  const target = await openMysqlTarget({ connectionLimit: 4, prefix: 'idem_sweeper' });
  const pool = mysql.createPool({ uri: target.url, connectionLimit: 4 });
  return {
    first: target.db,
    second: drizzleMysql(pool),
    async close() {
      await pool.end();
      await target.close();
    },
  };
}

const postgresServer = (await isServerReachable()) || postgresRequired();
const mysqlServer = await mysqlSuitesRun();

const TARGETS = [
  { database: 'SQLite (a lease row)', open: sqliteFile, skip: false },
  { database: 'PostgreSQL (pg_try_advisory_xact_lock)', open: postgresSchema, skip: !postgresServer },
  { database: 'MySQL (GET_LOCK)', open: mysqlDatabase, skip: !mysqlServer },
];

function deferred<T = void>() {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

describe.each(TARGETS)('R3: startSweeper on $database', ({ open, skip }) => {
  let connections: TwoConnections;
  let first: DrizzleStore;
  let second: DrizzleStore;
  const scope = `sweeper|${randomUUID()}`;

  beforeAll(async () => {
    if (skip) return;
    connections = await open();
    await migrate(connections.first);
    first = createDrizzleStore(connections.first);
    second = createDrizzleStore(connections.second);
  });
  afterAll(async () => {
    await connections?.close();
  });

  /** `count` completed records whose retention (1 ms) has passed by the database clock. */
  async function expired(count: number): Promise<string[]> {
    const keys = Array.from({ length: count }, () => `k-${randomUUID()}`);
    for (const key of keys) {
      const token = randomUUID();
      const claim = await first.claim({
        scope,
        key,
        fingerprint: null,
        token,
        leaseMs: 30_000,
        retentionMs: 1,
        expiredReuse: 'execute',
      });
      expect(claim.outcome).toBe('claimed');
      expect(await first.complete({ scope, key, token, outcome: { kind: 'success', status: 200, body: '{}' } })).toBe(
        true,
      );
    }
    // The database clock runs on this machine: 20 ms puts it past the 1 ms retention.
    await new Promise((resolve) => setTimeout(resolve, 20));
    return keys;
  }

  it.skipIf(skip)(
    'two sweepers started at once: one sweeps, the other skips; stop() waits for the current batch, and the lock is free afterwards',
    async () => {
      const keys = await expired(3);
      const firstBatch = deferred();
      const gate = deferred();
      const firstRound = deferred<SweepRound>();
      const secondRound = deferred<SweepRound>();
      let batchesRun = 0;
      const sweeping = startSweeper(first, {
        every: '1h',
        batchSize: 1,
        async onBatch() {
          batchesRun++;
          firstBatch.resolve();
          await gate.promise;
        },
        onRound: firstRound.resolve,
      });
      await firstBatch.promise;
      const skipping = startSweeper(second, { every: '1h', batchSize: 1, onRound: secondRound.resolve });
      expect(await secondRound.promise).toEqual({ skipped: true });

      let stopped = false;
      const stopping = sweeping.stop().then(() => {
        stopped = true;
      });
      await new Promise((resolve) => setImmediate(resolve));
      expect(stopped).toBe(false); // the batch in progress holds stop()
      gate.resolve();
      await stopping;
      expect(await firstRound.promise).toMatchObject({ skipped: false, archived: 1, batches: 1, stopped: 'signal' });
      expect(batchesRun).toBe(1);

      // The lock went with the round: the other sweeper now sweeps the rest.
      expect(await skipping.sweepNow()).toMatchObject({ skipped: false, archived: 2, stopped: 'done' });
      await skipping.stop();
      for (const key of keys) expect((await first.get(scope, key))?.state).toBe('archived');
    },
  );

  it.skipIf(skip)('sweepExclusive in one process twice at once: one sweeps, the other skips', async () => {
    await expired(2);
    const gate = deferred();
    const held = deferred();
    const running = first.sweepExclusive({
      batchSize: 1,
      async onBatch() {
        held.resolve();
        await gate.promise;
      },
    });
    await held.promise;
    expect(await first.sweepExclusive()).toEqual({ skipped: true });
    gate.resolve();
    expect(await running).toMatchObject({ skipped: false, archived: 2, stopped: 'done' });
  });
});

describe('R3: sweepAll in batches, with a time budget and a stop signal', () => {
  /** A store whose every batch comes back full: only the budget or the signal ends the sweep. */
  const endless = { sweep: async ({ batchSize = 1000 }: { batchSize?: number } = {}) => ({ archived: batchSize }) };

  it('stops after the batch during which the budget ran out, and reports every batch', async () => {
    const seen: number[] = [];
    const result = await sweepAll(endless, {
      batchSize: 10,
      budgetMs: 1,
      async onBatch({ total }) {
        seen.push(total);
        await new Promise((resolve) => setTimeout(resolve, 5)); // the budget has passed once this resolves
      },
    });
    expect(result).toMatchObject({ archived: 10, batches: 1, stopped: 'budget' });
    expect(seen).toEqual([10]);
  });

  it('stops after the current batch once the signal is aborted', async () => {
    const stop = new AbortController();
    const result = await sweepAll(endless, {
      batchSize: 3,
      signal: stop.signal,
      onBatch: ({ batches }) => {
        if (batches === 2) stop.abort();
      },
    });
    expect(result).toMatchObject({ archived: 6, batches: 2, stopped: 'signal' });
  });

  it('refuses a budget that is not a positive number of milliseconds', async () => {
    await expect(sweepAll(endless, { budgetMs: 0 })).rejects.toThrow(RangeError);
  });
});
