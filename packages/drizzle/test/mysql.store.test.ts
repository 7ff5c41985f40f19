/**
 * The drizzle store on MySQL (mysql2), run against the MariaDB at `MYSQL_URL`: the shared
 * behaviour suite (history, sweep, purge, timeline, table names), then what is MySQL's own —
 * the statements without RETURNING, the UTC clock, byte-exact keys, the migration lock.
 */
import { randomUUID } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import mysql from 'mysql2/promise';
import { sql, type SQL } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/mysql2';
import { describe, expect, it } from 'vitest';
import type { ClaimRequest } from '@idem/core/store';
import { createDrizzleStore, defineMysqlTables, migrate } from '../src/index.ts';
import { addedColumn } from '../src/migrate.ts';
import { migrationsFor } from '../src/migration-files.ts';
import { executedRows } from '../src/mysql/rows.ts';
import { mysqlSweepCandidates } from '../src/mysql/statements.ts';
import { mariadbOnlyStatements, mysqlSuitesRun, openMysqlTarget, type MysqlTarget } from './mysql-target.ts';
import { claimed, describeStoreBehaviour } from './store-behaviour.ts';

const run = await mysqlSuitesRun();

const rowsOf = async <T>(target: Pick<MysqlTarget, 'db'>, query: SQL) =>
  executedRows(await target.db.execute(query)) as T[];

const claimRequest = (overrides: Partial<ClaimRequest> = {}): ClaimRequest => ({
  scope: 's',
  key: randomUUID(),
  fingerprint: 'f',
  token: randomUUID(),
  leaseMs: 60_000,
  retentionMs: 60_000,
  expiredReuse: 'execute',
  ...overrides,
});

/** Runs `check` on a fresh migrated database, dropped afterwards. */
async function onFreshDatabase(check: (target: MysqlTarget) => Promise<void>): Promise<void> {
  const target = await openMysqlTarget();
  try {
    await migrate(target.db);
    await check(target);
  } finally {
    await target.close();
  }
}

describe.skipIf(!run)('MySQL (mysql2) at MYSQL_URL', () => {
  describeStoreBehaviour('MySQL server over mysql2, own database', async () => {
    const target = await openMysqlTarget();
    return {
      dialect: 'mysql',
      driver: 'mysql2',
      db: target.db,
      rows: (query) => rowsOf(target, query),
      exec: async (statement) => void (await target.db.execute(sql.raw(statement))),
      close: () => target.close(),
    };
  });

  it('sent no statement that MySQL 8 would refuse (RETURNING), although MariaDB runs them', () => {
    expect(mariadbOnlyStatements).toEqual([]);
  });

  describe('drizzle store on MySQL', () => {
    it('the migrations are MySQL 8 DDL: every table CREATE TABLE IF NOT EXISTS, its indexes inside it (no CREATE INDEX IF NOT EXISTS in MySQL); a new column ALTER TABLE … ADD, which migrate skips where the column exists; a data fix-up an UPDATE that a second run leaves as it is', () => {
      const folder = new URL('../migrations/mysql/', import.meta.url);
      const files = readdirSync(folder).filter((file) => file.endsWith('.sql'));
      expect(files.length).toBeGreaterThan(0);
      for (const file of files) {
        const statements = readFileSync(new URL(file, folder), 'utf8')
          .split('--> statement-breakpoint')
          .map((statement) => statement.trim());
        for (const statement of statements)
          expect(
            statement.startsWith('CREATE TABLE IF NOT EXISTS ') ||
              addedColumn(statement) !== undefined ||
              /^UPDATE `\w+` SET `attempts` = `takeovers` \+ 1 WHERE `takeovers` > 0 AND `attempts` = 1;$/.test(
                statement,
              ),
          ).toBe(true);
        expect(statements.join('\n')).not.toMatch(/CREATE (UNIQUE )?INDEX|RETURNING/i);
      }
    });

    it('R3: the sweeper selects expired rows through the (state, expires_at) index, not a table scan (EXPLAIN)', () =>
      onFreshDatabase(async (target) => {
        // 20,000 rows, mostly not expired or already archived, from a cross join of digits
        // (MySQL's recursive CTEs stop at 1000 rows by default).
        const digits = sql.raw(
          '(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)',
        );
        await target.db.execute(sql`
          INSERT INTO idem_keys (scope, \`key\`, generation, state, token, created_at, lease_until, expires_at, archived_at)
          SELECT 'plan', CONCAT('k', i), 1, CASE WHEN i % 3 = 0 THEN 'archived' ELSE 'completed' END, 't', UTC_TIMESTAMP(3), UTC_TIMESTAMP(3),
                 TIMESTAMPADD(SECOND, i - 100, UTC_TIMESTAMP(3)), CASE WHEN i % 3 = 0 THEN UTC_TIMESTAMP(3) END
          FROM (SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d + 1 AS i
                FROM ${digits} a, ${digits} b, ${digits} c, ${digits} e, ${digits} f) numbers
          WHERE i <= 20000`);
        await target.db.execute(sql`ANALYZE TABLE idem_keys`);
        const candidates = mysqlSweepCandidates(target.db, defineMysqlTables(), 1000).getSQL();
        const plan = await rowsOf<{ table: string; type: string; key: string | null }>(
          target,
          sql`EXPLAIN ${candidates}`,
        );
        expect(plan).toHaveLength(1);
        expect(plan[0]).toMatchObject({ table: 'idem_keys', type: 'range', key: 'idem_keys_expires_at_idx' });
      }));

    it('keeps keys as varbinary, bodies as utf8mb4 longtext and timestamps as datetime(3), whatever the database default', () =>
      onFreshDatabase(async (target) => {
        const columns = await rowsOf<{ column_name: string; column_type: string; character_set_name: string | null }>(
          target,
          sql`SELECT column_name AS column_name, column_type AS column_type, character_set_name AS character_set_name FROM information_schema.columns
              WHERE table_schema = ${target.database} AND table_name = 'idem_keys' AND column_name IN ('scope', 'key', 'token', 'body', 'expires_at') ORDER BY column_name`,
        );
        expect(columns).toEqual([
          { column_name: 'body', column_type: 'longtext', character_set_name: 'utf8mb4' },
          { column_name: 'expires_at', column_type: 'datetime(3)', character_set_name: null },
          { column_name: 'key', column_type: 'varbinary(512)', character_set_name: null },
          { column_name: 'scope', column_type: 'varbinary(1024)', character_set_name: null },
          { column_name: 'token', column_type: 'varbinary(255)', character_set_name: null },
        ]);
      }));

    it('S1/K1: keys and scopes that a text collation would fold (case, accents, trailing spaces) are distinct records', () =>
      onFreshDatabase(async (target) => {
        const store = createDrizzleStore(target.db);
        const key = `Key-${randomUUID()}`;
        const variants = [
          { scope: 'acct/é', key },
          { scope: 'acct/e', key },
          { scope: 'acct/e ', key },
          { scope: 'acct/E', key },
          { scope: 'acct/e', key: key.toLowerCase() },
        ];
        const tokens = [];
        for (const variant of variants) tokens.push(claimed(await store.claim(claimRequest(variant))).record.token);
        const [row] = await rowsOf<{ n: number }>(target, sql`SELECT count(*) AS n FROM idem_keys`);
        expect(Number(row?.n)).toBe(variants.length);
        for (const [i, variant] of variants.entries())
          expect(await store.get(variant.scope, variant.key)).toMatchObject({ ...variant, token: tokens[i] });
      }));

    it('refuses a scope longer than its column before writing anything (no silent truncation when sql_mode is not strict)', () =>
      onFreshDatabase(async (target) => {
        const store = createDrizzleStore(target.db);
        await expect(store.claim(claimRequest({ scope: 'é'.repeat(513) }))).rejects.toThrow(
          /\[idem\] MySQL store: the scope is 1026 bytes long in UTF-8; its column holds at most 1024/,
        );
        const [row] = await rowsOf<{ n: number }>(target, sql`SELECT count(*) AS n FROM idem_keys`);
        expect(Number(row?.n)).toBe(0);
        claimed(await store.claim(claimRequest({ scope: 'é'.repeat(512) })));
      }));

    it('R1: lease and retention are counted from the database clock in UTC to the millisecond, whatever the session time zone', async () => {
      const target = await openMysqlTarget({ connectionLimit: 1 });
      try {
        await migrate(target.db);
        await target.db.execute(sql`SET time_zone = '+05:00'`);
        const store = createDrizzleStore(target.db);
        const result = claimed(await store.claim(claimRequest({ leaseMs: 1234, retentionMs: 86_400_000 })));
        const [row] = await rowsOf<{ lease: number; retention: number; skew: number }>(
          target,
          sql`SELECT TIMESTAMPDIFF(MICROSECOND, created_at, lease_until) AS lease, TIMESTAMPDIFF(MICROSECOND, created_at, expires_at) AS retention,
                     ABS(TIMESTAMPDIFF(SECOND, created_at, UTC_TIMESTAMP())) AS skew FROM idem_keys WHERE \`key\` = ${result.record.key}`,
        );
        expect(row).toMatchObject({ lease: 1_234_000, retention: 86_400_000_000 });
        expect(Number(row?.skew)).toBeLessThan(5);
        expect(result.record.leaseUntil.getTime() - result.record.createdAt.getTime()).toBe(1234);
        // The record's instants are UTC: the session's +05:00 did not shift them.
        expect(Math.abs(result.record.createdAt.getTime() - Date.now())).toBeLessThan(60_000);
      } finally {
        await target.close();
      }
    });

    it('E1/E2: a replay is one SELECT; a new key is the SELECT, the INSERT and the read of the row it wrote (no RETURNING)', () =>
      onFreshDatabase(async (target) => {
        const statements: string[] = [];
        const store = createDrizzleStore(
          drizzle(target.pool, { logger: { logQuery: (query) => void statements.push(query) } }),
        );
        const request = claimRequest();

        const fresh = claimed(await store.claim(request));
        expect(statements.map((query) => query.split(' ')[0]?.toLowerCase())).toEqual(['select', 'insert', 'select']);
        expect(statements.join('\n')).not.toMatch(/returning/i);
        expect(fresh.record).toEqual(await store.get('s', request.key));
        await store.complete({
          scope: 's',
          key: request.key,
          token: request.token,
          outcome: { kind: 'success', status: 201, body: '{"id":1}' },
        });

        statements.length = 0;
        const replay = await store.claim({ ...request, token: randomUUID() });
        expect(statements).toHaveLength(1);
        expect(replay).toMatchObject({
          outcome: 'existing',
          expired: false,
          record: {
            state: 'completed',
            token: request.token,
            outcome: { kind: 'success', status: 201, body: '{"id":1}' },
          },
        });
      }));

    it('migrate() from several processes at once on a fresh database records the migration once (a named lock serializes them)', () =>
      onFreshDatabase(async (target) => {
        // Each pool stands for a process starting up: its own connections.
        const pools = Array.from({ length: 3 }, () => mysql.createPool({ uri: target.url, connectionLimit: 2 }));
        try {
          await target.db.execute(sql`DROP TABLE idem_keys, idem_key_history, __idem_migrations`);
          await Promise.all(pools.map((pool) => migrate(drizzle(pool))));
          const [row] = await rowsOf<{ n: number }>(target, sql`SELECT count(*) AS n FROM __idem_migrations`);
          expect(Number(row?.n)).toBe(migrationsFor('mysql').length);
          claimed(await createDrizzleStore(target.db).claim(claimRequest()));
        } finally {
          await Promise.all(pools.map((pool) => pool.end()));
        }
      }));

    it("names its locks within MySQL's 64 characters (MariaDB has no limit), for long journal tables, scopes and keys", () =>
      onFreshDatabase(async (target) => {
        const names: string[] = [];
        const logger = {
          logQuery: (query: string, params: unknown[]) =>
            void (/GET_LOCK/.test(query) && names.push(String(params[0]))),
        };
        const db = drizzle(target.pool, { logger });
        const journal = `journal_${'x'.repeat(56)}`;
        await migrate(db, { migrationsTable: journal });
        // Every migration again under another journal, on tables that exist: the added column is not added twice.
        const [row] = await rowsOf<{ n: number }>(target, sql`SELECT count(*) AS n FROM ${sql.identifier(journal)}`);
        expect(Number(row?.n)).toBe(migrationsFor('mysql').length);
        const claim = claimRequest({ scope: 's'.repeat(1000), key: 'k'.repeat(500) });
        const claimedInTransaction = await createDrizzleStore(db).transaction!(async (t) => {
          const { outcome } = await t.insertClaim(claim);
          return { commit: outcome === 'claimed', value: outcome };
        });
        expect(claimedInTransaction).toBe('claimed');
        expect(names).toHaveLength(2);
        for (const name of names) expect(name.length).toBeLessThanOrEqual(64);
      }));

    it('E5: every method rejects when the server cannot be reached', async () => {
      const pool = mysql.createPool({ uri: 'mysql://root@127.0.0.1:1/unreachable', connectTimeout: 500 });
      const store = createDrizzleStore(drizzle(pool));
      try {
        await expect(store.claim(claimRequest())).rejects.toThrow();
        await expect(store.release({ scope: 's', key: 'k', token: 't' })).rejects.toThrow();
        await expect(store.timeline('s', 'k')).rejects.toThrow();
        await expect(store.sweep()).rejects.toThrow();
        await expect(store.purge({ olderThanMs: 0 })).rejects.toThrow();
        await expect(store.ping()).rejects.toThrow();
      } finally {
        await pool.end();
      }
    });
  });
});
