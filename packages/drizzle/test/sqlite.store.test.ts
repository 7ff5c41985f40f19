import { randomUUID } from 'node:crypto';
import { drizzle } from 'drizzle-orm/better-sqlite3';
import { describe, expect, it, vi } from 'vitest';
import { createDrizzleStore, defineSqliteTables, migrate } from '../src/index.ts';
import { migrationsFor } from '../src/migration-files.ts';
import { sqliteSweepCandidates } from '../src/sqlite/statements.ts';
import { openSqliteTarget } from './sqlite-target.ts';
import { DRIVERS } from './drivers.ts';
import {
  APPLICATION_CLOCK_SHIFT_MS,
  claimed,
  describeStoreBehaviour,
  expectEveryMethodToReject,
} from './store-behaviour.ts';

for (const spec of DRIVERS.filter((each) => each.dialect === 'sqlite'))
  describeStoreBehaviour(spec.name, () => spec.open());

describe('drizzle store on SQLite', () => {
  it('R3: the sweeper selects expired rows through the partial expiry index (EXPLAIN QUERY PLAN)', async () => {
    const target = await openSqliteTarget();
    try {
      await migrate(target.db);
      const query = sqliteSweepCandidates(target.db, defineSqliteTables(), 1000).toSQL();
      const plan = target.client
        .prepare(`EXPLAIN QUERY PLAN ${query.sql}`)
        .all(...(query.params as unknown[]))
        .map((row) => (row as { detail: string }).detail)
        .join('\n');
      expect(plan).toContain('SEARCH idem_keys USING INDEX idem_keys_expires_at_idx (expires_at<?)');
      expect(plan).not.toContain('TEMP B-TREE');
    } finally {
      await target.close();
    }
  });

  it("R1: timestamps are SQLite clock milliseconds stored as integers, following julianday('now') and not the application's Date (moved back a year); bodies as text", async () => {
    const target = await openSqliteTarget();
    try {
      await migrate(target.db);
      const store = createDrizzleStore(target.db);
      const key = randomUUID();
      const databaseNow = () =>
        (
          target.client
            .prepare(`SELECT CAST(ROUND((julianday('now') - 2440587.5) * 86400000) AS INTEGER) AS now`)
            .get() as { now: number }
        ).now;
      const before = databaseNow();
      vi.setSystemTime(Date.now() - APPLICATION_CLOCK_SHIFT_MS);
      let result;
      try {
        result = await store.claim({
          scope: 's',
          key,
          fingerprint: null,
          token: 't',
          leaseMs: 1000,
          retentionMs: 5000,
          expiredReuse: 'execute',
        });
        await store.complete({
          scope: 's',
          key,
          token: 't',
          outcome: { kind: 'success', status: 200, body: '{"b":1,"a":2}' },
        });
      } finally {
        vi.useRealTimers();
      }
      const after = databaseNow();
      const { record } = claimed(result);
      const row = target.client
        .prepare(
          `SELECT typeof(created_at) AS created, typeof(body) AS body, created_at AS createdAt, completed_at AS completedAt,
                  lease_until - created_at AS lease, expires_at - completed_at AS retention, typeof(expires_at) AS expires
           FROM idem_keys WHERE key = ?`,
        )
        .get(key) as { createdAt: number; completedAt: number };
      expect(row).toMatchObject({
        created: 'integer',
        expires: 'integer',
        body: 'text',
        createdAt: record.createdAt.getTime(),
        lease: 1000,
        retention: 5000,
      });
      // Stamped with the application's time, the row would lie a year before `before`.
      for (const stamp of [row.createdAt, row.completedAt]) {
        expect(stamp).toBeGreaterThanOrEqual(before);
        expect(stamp).toBeLessThanOrEqual(after);
      }
    } finally {
      await target.close();
    }
  });

  it('E5: every method, atomic mode included, rejects (never throws synchronously, never resolves) once the database is closed', async () => {
    const target = await openSqliteTarget();
    await migrate(target.db);
    const store = createDrizzleStore(target.db);
    target.client.close();
    try {
      await expectEveryMethodToReject(store);
    } finally {
      await target.close();
    }
  });

  it('migrate under another journal table, on tables that exist: every migration is recorded again and the added waits column is not added twice', async () => {
    const target = await openSqliteTarget();
    try {
      await migrate(target.db);
      await migrate(target.db, { migrationsTable: '__other_journal' });
      const recorded = target.client.prepare('SELECT count(*) AS n FROM __other_journal').get() as { n: number };
      expect(recorded.n).toBe(migrationsFor('sqlite').length);
      const columns = target.client.prepare("SELECT name FROM pragma_table_info('idem_keys')").all() as Array<{
        name: string;
      }>;
      expect(columns.filter(({ name }) => name === 'waits')).toHaveLength(1);
      const store = createDrizzleStore(target.db);
      const key = randomUUID();
      await store.claim({
        scope: 's',
        key,
        fingerprint: null,
        token: 't',
        leaseMs: 1000,
        retentionMs: 5000,
        expiredReuse: 'execute',
      });
      expect(await store.countWait({ scope: 's', key, generation: 1 })).toBe(true);
      expect(await store.get('s', key)).toMatchObject({ waits: 1 });
    } finally {
      await target.close();
    }
  });

  it('refuses a database that is not a drizzle instance', () => {
    expect(() => createDrizzleStore({} as never)).toThrow(/\[idem\] unsupported database/);
  });

  it('E2: a replay reads the key with one SELECT; a new key is that read, the insert and the completion', async () => {
    const target = await openSqliteTarget();
    try {
      await migrate(target.db);
      const statements: string[] = [];
      const store = createDrizzleStore(
        drizzle({
          client: target.client,
          logger: { logQuery: (query) => void statements.push(query.split(' ')[0]!.toLowerCase()) },
        }),
      );
      const request = {
        scope: 's',
        key: randomUUID(),
        fingerprint: 'f',
        token: 't1',
        leaseMs: 60_000,
        retentionMs: 60_000,
        expiredReuse: 'execute',
      } as const;

      expect((await store.claim(request)).outcome).toBe('claimed');
      await store.complete({
        scope: 's',
        key: request.key,
        token: 't1',
        outcome: { kind: 'success', status: 201, body: '{"id":1}' },
      });
      expect(statements).toEqual(['select', 'insert', 'update']);

      statements.length = 0;
      const replay = await store.claim({ ...request, token: 't2' });
      expect(statements).toEqual(['select']);
      // The hot read maps its row by position: it must answer what drizzle's own mapping answers.
      expect(replay).toMatchObject({ outcome: 'existing', expired: false, record: await store.get('s', request.key) });
      expect(replay.record).toMatchObject({
        state: 'completed',
        token: 't1',
        generation: 1,
        outcome: { kind: 'success', status: 201, body: '{"id":1}' },
      });
      expect(replay.record.completedAt).toBeInstanceOf(Date);
    } finally {
      await target.close();
    }
  });
});
