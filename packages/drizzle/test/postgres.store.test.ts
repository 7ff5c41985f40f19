import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { sql, type SQL } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { describe, expect, it, vi } from 'vitest';
import { createDrizzleStore, definePgTables, migrate } from '../src/index.ts';
import { pgSweepCandidates } from '../src/pg/statements.ts';
import { isServerReachable, openPostgresTarget, postgresRequired, type PostgresTarget } from './pg-target.ts';
import { DRIVERS } from './drivers.ts';
import {
  APPLICATION_CLOCK_SHIFT_MS,
  claimed,
  describeStoreBehaviour,
  expectEveryMethodToReject,
} from './store-behaviour.ts';

const where =
  (await isServerReachable()) || postgresRequired()
    ? 'PostgreSQL server, own schema'
    : 'PostgreSQL on PGlite (no server reachable)';

const rowsOf = async <T>(target: PostgresTarget, query: Parameters<PostgresTarget['db']['execute']>[0]) =>
  ((await target.db.execute(query)) as unknown as { rows: T[] }).rows;

for (const spec of DRIVERS.filter((each) => each.dialect === 'postgres')) {
  if (spec.runs) describeStoreBehaviour(spec.name, () => spec.open());
  else describe.skip(`drizzle store behaviour: ${spec.name} (no PostgreSQL server reachable)`, () => {});
}

describe(`drizzle store on ${where}`, () => {
  it('R3: the sweeper selects expired rows through the partial expiry index (EXPLAIN)', async () => {
    const target = await openPostgresTarget();
    try {
      await migrate(target.db);
      // Enough rows, mostly not expired or already archived, that a sequential scan would lose.
      await target.db.execute(sql`
        INSERT INTO idem_keys (scope, key, generation, state, token, created_at, lease_until, expires_at, archived_at)
        SELECT 'plan', 'k' || i, 1, CASE WHEN i % 3 = 0 THEN 'archived' ELSE 'completed' END, 't', now(), now(),
               now() + (i - 100) * interval '1 second', CASE WHEN i % 3 = 0 THEN now() END
        FROM generate_series(1, 20000) AS i`);
      await target.db.execute(sql`ANALYZE idem_keys`);
      const candidates = pgSweepCandidates(target.db, definePgTables(), 1000).getSQL();
      const plan = (await rowsOf<{ 'QUERY PLAN': string }>(target, sql`EXPLAIN ${candidates}`))
        .map((row) => row['QUERY PLAN'])
        .join('\n');
      expect(plan).toMatch(/Index Scan using idem_keys_expires_at_idx on idem_keys/);
      expect(plan).not.toMatch(/Seq Scan/);
    } finally {
      await target.close();
    }
  });

  it('keeps tables and the migrations journal in the connection schema, bodies as text and timestamps as timestamptz', async () => {
    const target = await openPostgresTarget();
    try {
      await migrate(target.db);
      const tables = await rowsOf<{ table_name: string }>(
        target,
        sql`SELECT table_name FROM information_schema.tables WHERE table_schema = ${target.schema} ORDER BY table_name`,
      );
      expect(tables.map((row) => row.table_name)).toEqual(['__idem_migrations', 'idem_key_history', 'idem_keys']);
      const columns = await rowsOf<{ column_name: string; data_type: string }>(
        target,
        sql`SELECT column_name, data_type FROM information_schema.columns
            WHERE table_schema = ${target.schema} AND table_name = 'idem_keys' AND column_name IN ('body', 'expires_at') ORDER BY column_name`,
      );
      expect(columns).toEqual([
        { column_name: 'body', data_type: 'text' },
        { column_name: 'expires_at', data_type: 'timestamp with time zone' },
      ]);
    } finally {
      await target.close();
    }
  });

  it("R1: created_at, lease_until and expires_at follow the database's now() to the millisecond, not the application's Date (moved back a year)", async (context) => {
    const target = await openPostgresTarget();
    try {
      if (target.kind === 'pglite')
        context.skip("PGlite runs inside this process: its now() is the application's Date");
      await migrate(target.db);
      const store = createDrizzleStore(target.db);
      const key = randomUUID();
      const epochMs = (column: SQL) => sql`(extract(epoch FROM ${column}) * 1000)::bigint`;
      const databaseNow = async () =>
        Number(
          (
            await rowsOf<{ now: string }>(
              target,
              sql`SELECT ${epochMs(sql`date_trunc('milliseconds', clock_timestamp())`)} AS now`,
            )
          )[0]!.now,
        );
      const before = await databaseNow();
      vi.setSystemTime(Date.now() - APPLICATION_CLOCK_SHIFT_MS);
      let result;
      try {
        result = await store.claim({
          scope: 's',
          key,
          fingerprint: null,
          token: 't',
          leaseMs: 1234,
          retentionMs: 86_400_000,
          expiredReuse: 'execute',
        });
      } finally {
        vi.useRealTimers();
      }
      const after = await databaseNow();
      const { record } = claimed(result);
      const [row] = await rowsOf<{ created: string; lease: string; retention: string }>(
        target,
        sql`SELECT ${epochMs(sql`created_at`)} AS created, (lease_until - created_at)::text AS lease, (expires_at - created_at)::text AS retention FROM idem_keys WHERE key = ${key}`,
      );
      expect(row).toMatchObject({ lease: '00:00:01.234', retention: '1 day' });
      expect(Number(row!.created)).toBe(record.createdAt.getTime());
      // Stamped with the application's time, the row would lie a year before `before`.
      expect(record.createdAt.getTime()).toBeGreaterThanOrEqual(before);
      expect(record.createdAt.getTime()).toBeLessThanOrEqual(after);
      expect(record.leaseUntil.getTime() - record.createdAt.getTime()).toBe(1234);
      expect(record.expiresAt.getTime() - record.createdAt.getTime()).toBe(86_400_000);
    } finally {
      await target.close();
    }
  });

  it('E5: every method, atomic mode included, rejects when the server cannot be reached (a closed port)', async () => {
    const pool = new pg.Pool({
      connectionString: 'postgres://postgres@127.0.0.1:1/unreachable',
      connectionTimeoutMillis: 500,
    });
    try {
      await expectEveryMethodToReject(createDrizzleStore(drizzle({ client: pool })));
    } finally {
      await pool.end();
    }
  });

  it("E1/E2: a new key and a replay are one claim-or-read statement each, answering what drizzle's own mapping answers", async () => {
    const target = await openPostgresTarget();
    try {
      await migrate(target.db);
      let statements = 0;
      const store = createDrizzleStore(target.withLogger({ logQuery: () => void statements++ }));
      const request = {
        scope: 's',
        key: randomUUID(),
        fingerprint: 'f',
        token: 't1',
        leaseMs: 60_000,
        retentionMs: 60_000,
        expiredReuse: 'execute',
      } as const;

      const fresh = await store.claim(request);
      expect(fresh).toMatchObject({
        outcome: 'claimed',
        record: { state: 'processing', token: 't1', generation: 1, outcome: null },
      });
      // Positional mapping of the driver's rows: the same record drizzle maps for `get`.
      expect(fresh.record).toEqual(await store.get('s', request.key));
      await store.complete({
        scope: 's',
        key: request.key,
        token: 't1',
        outcome: { kind: 'success', status: 201, body: '{"id":1}' },
      });

      statements = 0;
      const replay = await store.claim({ ...request, token: 't2' });
      expect(statements).toBe(1);
      expect(replay).toMatchObject({
        outcome: 'existing',
        expired: false,
        record: { state: 'completed', token: 't1', outcome: { kind: 'success', status: 201, body: '{"id":1}' } },
      });
      expect(replay.record).toEqual(await store.get('s', request.key));
      if (replay.outcome !== 'existing') throw new Error('expected a replay');
      expect(replay.now).toBeInstanceOf(Date);
      expect(Math.abs(replay.now.getTime() - Date.now())).toBeLessThan(60_000);
    } finally {
      await target.close();
    }
  });
});
