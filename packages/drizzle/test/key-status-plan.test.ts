/**
 * The key-status lookup (`lookUpKeyStatus`: the store's `timeline` and `get`) reads a key through
 * the primary keys, never by scanning, so that its cost does not grow with the archived rows a
 * reconciliation window keeps (R3, A1): the statements the Drizzle store runs for one lookup are
 * captured with drizzle's logger and explained (EXPLAIN on PostgreSQL, EXPLAIN QUERY PLAN on
 * SQLite) over tables holding tens of thousands of archived records of other keys. On
 * PostgreSQL the buffers one lookup touches are counted (EXPLAIN ANALYZE, BUFFERS) with 1,000 and
 * with 31,000 archived rows: a count of pages, not a time.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql, type Logger } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/better-sqlite3';
import { formatScope, type IdempotencyStore } from '@idem/core';
import { lookUpKeyStatus } from '@idem/core/key-status';
import { createDrizzleStore, migrate, type DrizzleDatabase } from '@idem/drizzle';
import { openPostgresTarget, type PostgresTarget } from './pg-target.ts';
import { openSqliteTarget, type SqliteTarget } from './sqlite-target.ts';

const ARCHIVED_ROWS = 30_000;
const SCOPE = formatScope('payments.create', 'alice');

/** Captures the statements drizzle runs, with their parameters. */
function capturing() {
  const statements: Array<{ query: string; params: unknown[] }> = [];
  const logger: Logger = { logQuery: (query, params) => void statements.push({ query, params }) };
  return { statements, logger };
}

/** A key with two generations: one archived into history (reused), one completed and live. */
async function keyWithTwoGenerations(store: IdempotencyStore): Promise<string> {
  const key = randomUUID();
  const claim = async (retentionMs: number) => {
    const result = await store.claim({
      scope: SCOPE,
      key,
      fingerprint: null,
      token: randomUUID(),
      leaseMs: 1,
      retentionMs,
      expiredReuse: 'execute',
    });
    if (result.outcome !== 'claimed') throw new Error('not claimed');
    await store.complete({
      scope: SCOPE,
      key,
      token: result.record.token,
      outcome: { kind: 'success', status: 200, body: '{"id":"pay_1"}' },
    });
  };
  await claim(1);
  await new Promise((resolve) => setTimeout(resolve, 5));
  await claim(3_600_000);
  return key;
}

/** The statements one lookup runs, captured through a store over a logging drizzle instance. */
async function lookUpStatements(
  store: IdempotencyStore,
  statements: Array<{ query: string; params: unknown[] }>,
  key: string,
) {
  statements.length = 0;
  const status = await lookUpKeyStatus(store, {
    key,
    operation: 'payments.create',
    scopes: [{ scope: SCOPE, operation: 'payments.create' }],
  });
  expect(status?.generations.map((generation) => generation.state)).toEqual(['archived', 'completed']);
  expect(statements.length).toBeGreaterThanOrEqual(2);
  return [...statements];
}

describe('the key-status lookup reads through the primary keys (EXPLAIN)', () => {
  describe('PostgreSQL', () => {
    let target: PostgresTarget;
    let store: IdempotencyStore;
    const { statements, logger } = capturing();

    beforeAll(async () => {
      target = await openPostgresTarget({ schemaPrefix: 'idem_status_plan' });
      await migrate(target.db as DrizzleDatabase);
      store = createDrizzleStore(target.withLogger(logger) as DrizzleDatabase);
    });
    afterAll(() => target?.close());

    /** Archived records of other keys, in history and live tables alike. */
    const archive = async (rows: number) => {
      const columns = sql.raw(
        `'other/payments.create', md5(i::text || random()::text), 1, null, 'archived', 'tok', now() - interval '2 days', now() - interval '2 days', now() - interval '1 day', now() - interval '2 days', now() - interval '1 day', 0, 'success', 200, null`,
      );
      await target.db.execute(
        sql`INSERT INTO idem_key_history SELECT ${columns}, now() - interval '1 day' FROM generate_series(1, ${rows}) AS i`,
      );
      await target.db.execute(
        sql`INSERT INTO idem_keys (scope, key, generation, fingerprint, state, token, created_at, lease_until, expires_at, completed_at, archived_at, takeovers, outcome_kind, outcome_status, body) SELECT ${columns} FROM generate_series(1, ${rows}) AS i`,
      );
      await target.db.execute(sql`ANALYZE idem_keys`);
      await target.db.execute(sql`ANALYZE idem_key_history`);
    };

    const explain = async (statement: { query: string; params: unknown[] }, options: string) => {
      const rows = (await target.pool!.query(`EXPLAIN (${options}) ${statement.query}`, statement.params))
        .rows as Array<{
        'QUERY PLAN': unknown;
      }>;
      return rows[0]!['QUERY PLAN'] as Array<{ Plan: PlanNode }>;
    };
    interface PlanNode {
      'Node Type': string;
      'Index Name'?: string;
      'Relation Name'?: string;
      'Shared Hit Blocks'?: number;
      'Shared Read Blocks'?: number;
      Plans?: PlanNode[];
    }
    const nodes = (node: PlanNode): PlanNode[] => [node, ...(node.Plans ?? []).flatMap(nodes)];
    const blocks = (node: PlanNode) => (node['Shared Hit Blocks'] ?? 0) + (node['Shared Read Blocks'] ?? 0);

    it('R3: get and timeline use the primary keys of idem_keys and idem_key_history, and touch at most two more pages with 31,000 archived rows than with 1,000', async (context) => {
      // PGlite (no server, IDEM_REQUIRE_POSTGRES unset): no pool to EXPLAIN through.
      if (target.kind !== 'server') context.skip();
      const key = await keyWithTwoGenerations(store);
      await archive(1000);
      const before = await lookUpStatements(store, statements, key);
      const pagesBefore = await Promise.all(
        before.map(async (statement) => blocks((await explain(statement, 'ANALYZE, BUFFERS, FORMAT JSON'))[0]!.Plan)),
      );

      await archive(ARCHIVED_ROWS);
      const after = await lookUpStatements(store, statements, key);
      expect(after.map((statement) => statement.query)).toEqual(before.map((statement) => statement.query));
      for (const statement of after) {
        const [plan] = await explain(statement, 'FORMAT JSON');
        const scanned = nodes(plan!.Plan);
        expect(scanned.filter((node) => node['Node Type'] === 'Seq Scan')).toEqual([]);
        for (const node of scanned.filter((candidate) => candidate['Relation Name']))
          expect(node['Index Name']).toMatch(/^idem_key(s|_history)_scope_key(_generation)?_pk$/);
      }
      const pagesAfter = await Promise.all(
        after.map(async (statement) => blocks((await explain(statement, 'ANALYZE, BUFFERS, FORMAT JSON'))[0]!.Plan)),
      );
      // A B-tree one level deeper at most: a page or two more per statement, where a scan would read every page.
      for (const [index, pages] of pagesAfter.entries()) expect(pages).toBeLessThanOrEqual(pagesBefore[index]! + 2);
      const tablePages = (
        await target.pool!.query(
          `SELECT sum(relpages)::int AS pages FROM pg_class WHERE relname IN ('idem_keys', 'idem_key_history')`,
        )
      ).rows[0].pages as number;
      expect(tablePages).toBeGreaterThan(50 * Math.max(...pagesAfter));
      if (process.env.IDEM_PRINT_PLANS)
        console.log(
          JSON.stringify(
            {
              pagesBefore,
              pagesAfter,
              plans: await Promise.all(after.map((statement) => explain(statement, 'FORMAT TEXT'))),
            },
            null,
            1,
          ),
        );
    });
  });

  describe('SQLite', () => {
    let target: SqliteTarget;
    let store: IdempotencyStore;
    const { statements, logger } = capturing();

    beforeAll(async () => {
      target = await openSqliteTarget();
      await migrate(target.db);
      store = createDrizzleStore(drizzle({ client: target.client, logger }));
    });
    afterAll(() => target?.close());

    it('R3: get and timeline SEARCH the primary keys, with 30,000 archived rows of other keys', async () => {
      const key = await keyWithTwoGenerations(store);
      const insert = (table: string, reused: boolean) =>
        target.client
          .prepare(
            `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${ARCHIVED_ROWS})
             INSERT INTO ${table} (scope, key, generation, state, token, created_at, lease_until, expires_at, completed_at, archived_at, takeovers, outcome_kind, outcome_status${reused ? ', reused_at' : ''})
             SELECT 'other/payments.create', 'k' || i, 1, 'archived', 'tok', 1, 1, 2, 1, 3, 0, 'success', 200${reused ? ', 3' : ''} FROM n`,
          )
          .run();
      insert('idem_key_history', true);
      insert('idem_keys', false);
      target.client.exec('ANALYZE');

      for (const statement of await lookUpStatements(store, statements, key)) {
        const plan = target.client
          .prepare(`EXPLAIN QUERY PLAN ${statement.query}`)
          .all(...(statement.params as unknown[])) as Array<{ detail: string }>;
        const details = plan.map((row) => row.detail);
        if (process.env.IDEM_PRINT_PLANS) console.log(statement.query, details);
        expect(details.length).toBeGreaterThan(0);
        for (const detail of details) {
          expect(detail).not.toMatch(/^SCAN /);
          expect(detail).toMatch(
            /^SEARCH idem_key(s|_history) USING (PRIMARY KEY|INDEX sqlite_autoindex_idem_key(s|_history)_1) \(scope=\? AND key=\?\)$/,
          );
        }
      }
    });
  });
});
