/**
 * `idem stats` and `idem doctor` on SQLite, PostgreSQL and MySQL, run as the bin: the figures
 * per state and per operation, the oldest claim past its lease (E6), expired but not swept (R3);
 * doctor on a healthy database (exit 0) and on one with the expiry index dropped, a stuck claim,
 * overdue sweeping and a published retention shorter than its lease (R1) (exit 1, each named
 * with what to do).
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createDrizzleStore, migrate, type DrizzleDatabase, type DrizzleStore } from '../src/index.ts';
import { statsQueries } from '../src/cli/health.ts';
import type { OpenedDatabase } from '../src/connect.ts';
import type { AnyPgDatabase } from '../src/dialect.ts';
import { DEFAULT_TABLE_NAMES } from '../src/table-names.ts';
import { idemCli } from './cli-run.ts';
import { mysqlSuitesRun, openMysqlTarget } from './mysql-target.ts';
import { isServerReachable, openPostgresTarget, postgresRequired } from './pg-target.ts';
import { openSqliteConnection } from './sqlite-target.ts';

vi.setConfig({ testTimeout: 120_000 });

interface Target {
  url: string;
  db: DrizzleDatabase;
  /** Runs one statement of DDL on the target. */
  run(statement: string): Promise<void>;
  dropExpiryIndex: string;
  close(): Promise<void>;
}

async function sqliteTarget(): Promise<Target> {
  const directory = mkdtempSync(join(tmpdir(), 'idem-doctor-'));
  const file = join(directory, 'idem.db');
  const connection = openSqliteConnection(file);
  return {
    url: `file:${file}`,
    db: connection.db,
    run: async (statement) => void connection.db.run(sql.raw(statement)),
    dropExpiryIndex: 'DROP INDEX idem_keys_expires_at_idx',
    async close() {
      connection.client.close();
      rmSync(directory, { recursive: true, force: true });
    },
  };
}

async function postgresTarget(): Promise<Target> {
  const target = await openPostgresTarget({ max: 2, schemaPrefix: 'idem_doctor' });
  return {
    url: target.url!,
    db: target.db,
    run: async (statement) => void (await target.db.execute(sql.raw(statement))),
    dropExpiryIndex: 'DROP INDEX idem_keys_expires_at_idx',
    close: () => target.close(),
  };
}

async function mysqlTarget(): Promise<Target> {
  const target = await openMysqlTarget({ connectionLimit: 2, prefix: 'idem_doctor' });
  return {
    url: target.url,
    db: target.db,
    run: async (statement) => void (await target.db.execute(sql.raw(statement))),
    dropExpiryIndex: 'DROP INDEX idem_keys_expires_at_idx ON idem_keys',
    close: () => target.close(),
  };
}

const postgresServer = (await isServerReachable()) || postgresRequired();
const mysqlServer = await mysqlSuitesRun();

const TARGETS = [
  { database: 'SQLite', open: sqliteTarget, skip: false },
  { database: 'PostgreSQL', open: postgresTarget, skip: !postgresServer },
  { database: 'MySQL', open: mysqlTarget, skip: !mysqlServer },
];

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe.each(TARGETS)('idem stats and doctor on $database', ({ open, skip }) => {
  let target: Target;
  let store: DrizzleStore;
  const principal = `acct_${randomUUID().slice(0, 8)}`;

  beforeAll(async () => {
    if (skip) return;
    target = await open();
    await migrate(target.db);
    store = createDrizzleStore(target.db);
  });
  afterAll(async () => {
    await target?.close();
  });

  async function record(
    operation: string,
    { leaseMs = 30_000, retentionMs = 3_600_000, complete = true, resumable = false } = {},
  ): Promise<string> {
    const scope = `${principal}/${operation}`;
    const key = `k-${randomUUID()}`;
    const token = randomUUID();
    const claim = await store.claim({
      scope,
      key,
      fingerprint: null,
      token,
      leaseMs,
      retentionMs,
      expiredReuse: 'execute',
    });
    expect(claim.outcome).toBe('claimed');
    if (complete)
      expect(
        await store.complete({
          scope,
          key,
          token,
          outcome: resumable
            ? { kind: 'error', status: 503, body: '{}' }
            : { kind: 'success', status: 200, body: '{}' },
          resumable,
        }),
      ).toBe(true);
    return scope;
  }

  it.skipIf(skip)('doctor on a healthy database: every check passes, exit 0', async () => {
    await record('payments.create');
    const run = await idemCli(['doctor'], target.url);
    expect(run.stderr).toBe('');
    expect(run.code, run.stdout).toBe(0);
    for (const check of ['migrations', 'expiry-index', 'clock-skew', 'claims-past-lease', 'sweeping'])
      expect(run.stdout).toMatch(new RegExp(`^ok {4}${check}: `, 'm'));
    expect(run.stdout).not.toContain('FAIL');
    expect(run.stdout.trimEnd().split('\n').at(-1)).toBe('no findings');
  });

  it.skipIf(skip)(
    'stats counts per state (E8: resumable too) and per operation, the oldest claim past its lease, expired not swept; --json the same',
    async () => {
      await record('payments.create');
      await record('payments.create', { resumable: true });
      const stuck = await record('refunds.create', { leaseMs: 1, complete: false });
      await record('refunds.create', { retentionMs: 1 });
      await sleep(20);
      const [text, json] = await Promise.all([
        idemCli(['stats'], target.url),
        idemCli(['stats', '--json'], target.url),
      ]);
      expect(text.stderr).toBe('');
      expect(text.code).toBe(0);
      expect(json.code).toBe(0);
      const stats = JSON.parse(json.stdout);
      expect(stats).toMatchObject({
        counts: { kind: 'count' }, // a small table: counted, on every dialect
        states: { processing: 1, completed: 3, released: 0, resumable: 1, archived: 0 },
        operations: [
          { operation: 'payments.create', processing: 0, completed: 2, released: 0, resumable: 1, archived: 0 },
          { operation: 'refunds.create', processing: 1, completed: 1, released: 0, resumable: 0, archived: 0 },
        ],
        oldestProcessing: { scope: stuck, pastLease: true },
        takeoversLastDay: 0,
        expiredNotSwept: 1, // the 1 ms retention; the stuck claim's retention (1 h) still runs
        archived: 0,
        history: 0,
      });
      expect(text.stdout).toMatch(/^processing +1$/m);
      expect(text.stdout).toMatch(/^resumable +1$/m);
      expect(text.stdout).toMatch(/^operation +processing +completed +released +resumable +archived$/m);
      expect(text.stdout).toMatch(/^payments\.create +0 +2 +0 +1 +0$/m);
      expect(text.stdout).toMatch(/^refunds\.create +1 +1 +0 +0 +0$/m);
      expect(text.stdout).toContain(`oldest processing claim: ${stuck}, first seen `);
      expect(text.stdout).toContain('(past its lease: idem doctor)');
      expect(text.stdout).toMatch(/^expired, not swept: 1 \(the oldest expired at \S+Z\)$/m);
    },
  );

  it.skipIf(skip)(
    'doctor: an application clock 10 minutes ahead of the database is a clock-skew finding, exit 1',
    async () => {
      // The bin's own clock is moved (Date.now), as on a machine whose NTP has drifted; the database keeps its.
      const ahead = `data:text/javascript,${encodeURIComponent('const now = Date.now; Date.now = () => now() + 600000;')}`;
      const run = await idemCli(['doctor'], target.url, { env: { NODE_OPTIONS: `--import=${ahead}` } });
      expect(run.stderr).toBe('');
      expect(run.code, run.stdout).toBe(1);
      expect(run.stdout).toMatch(/^FAIL {2}clock-skew: the database clock is (9m 59s|10m) behind this machine's$/m);
      expect(run.stdout).toMatch(/^ {6}fix: synchronise both with NTP/m);
    },
  );

  it.skipIf(skip)(
    'stats --exact with --estimate is a usage error; --estimate without statistics says why (exit 2 outside PostgreSQL, 1 before ANALYZE)',
    async () => {
      const both = await idemCli(['stats', '--exact', '--estimate'], target.url);
      expect(both.code).toBe(2);
      expect(both.stderr).toMatch(/^idem: stats: --exact and --estimate exclude each other/);
      const estimate = await idemCli(['stats', '--estimate'], target.url);
      if (target.url.startsWith('postgres')) {
        // Fresh tables, never analyzed: no statistics to read yet (the estimate test below runs ANALYZE).
        expect(estimate.code).toBe(1);
        expect(estimate.stderr).toMatch(
          /idem_keys has no planner statistics yet: run ANALYZE idem_keys .* or idem stats --exact/,
        );
      } else {
        expect(estimate.code).toBe(2);
        expect(estimate.stderr).toMatch(
          /--estimate reads PostgreSQL's planner statistics; on (SQLite|MySQL) stats counts/,
        );
      }
    },
  );

  it.skipIf(skip)(
    'doctor with the expiry index dropped, a stuck claim, overdue sweeping and a retention shorter than its lease: exit 1, each finding with what to do',
    async () => {
      await target.run(target.dropExpiryIndex);
      const server = createServer((_, res) => {
        res.setHeader('content-type', 'application/json');
        res.end(
          JSON.stringify({
            endpoints: [
              { endpoint: 'payments.create', retentionMs: 86_400_000, leaseMs: 30_000 },
              { endpoint: 'refunds.create', retentionMs: 10_000, leaseMs: 30_000 },
            ],
          }),
        );
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/idempotency`;
      try {
        const [text, json] = await Promise.all([
          idemCli(['doctor', '--url', url, '--sweep-lag', '1ms'], target.url),
          idemCli(['doctor', '--url', url, '--sweep-lag', '1ms', '--json'], target.url),
        ]);
        expect(text.stderr).toBe('');
        expect(text.code).toBe(1);
        expect(text.stdout).toMatch(/^FAIL {2}expiry-index: idem_keys has no index idem_keys_expires_at_idx/m);
        expect(text.stdout).toMatch(/^FAIL {2}claims-past-lease: 1 processing claim past the lease/m);
        expect(text.stdout).toMatch(/^FAIL {2}sweeping: sweeping is overdue: 1 expired record not archived/m);
        expect(text.stdout).toMatch(
          /^FAIL {2}retention-vs-lease: retention shorter than the lease on refunds\.create /m,
        );
        expect(text.stdout).not.toMatch(/retention-vs-lease: .*payments\.create/);
        expect(text.stdout.match(/^ {6}fix: /gm)).toHaveLength(4);
        expect(text.stdout).toMatch(/^ok {4}migrations: /m);
        expect(text.stdout.trimEnd().split('\n').at(-1)).toBe('4 findings');
        expect(json.code).toBe(1);
        const report = JSON.parse(json.stdout) as { ok: boolean; checks: { check: string; ok: boolean }[] };
        expect(report.ok).toBe(false);
        expect(report.checks.filter((each) => !each.ok).map((each) => each.check)).toEqual([
          'expiry-index',
          'retention-vs-lease',
          'claims-past-lease',
          'sweeping',
        ]);
      } finally {
        server.close();
      }
    },
  );
});

/**
 * PostgreSQL at scale: the counts by state and operation from the planner statistics (no row of
 * the table read), and the takeovers through their partial index. 40,000 rows, so that ANALYZE's
 * sample (30,000 rows at the default target) is not the whole table.
 */
describe.skipIf(!postgresServer)('idem stats on PostgreSQL from the planner statistics', () => {
  let target: Target;
  const ROWS = 40_000;
  beforeAll(async () => {
    target = await postgresTarget();
    await migrate(target.db);
    // Three operations × four states in fixed proportions, 40 of the rows taken over recently.
    await target.run(`INSERT INTO idem_keys (scope, key, generation, state, token, created_at, lease_until, expires_at, takeovers)
      SELECT 'acct_' || (i % 97) || '/' || (ARRAY['payments.create', 'payments.create', 'refunds.create', 'payouts.create'])[1 + i % 4],
             'k' || i, 1,
             (ARRAY['completed', 'completed', 'completed', 'processing', 'released', 'archived'])[1 + i % 6],
             md5(i::text), now(), now() + interval '1 minute', now() + interval '1 day',
             CASE WHEN i % 1000 = 0 THEN 1 ELSE 0 END
      FROM generate_series(1, ${ROWS}) AS i`);
    await target.run('ANALYZE idem_keys');
  });
  afterAll(async () => {
    await target?.close();
  });

  it('--estimate: states and operations within 3% of --exact, said to be estimates; auto counts below 1,000,000 rows', async () => {
    const [estimated, exact, auto, text] = await Promise.all([
      idemCli(['stats', '--estimate', '--json'], target.url),
      idemCli(['stats', '--exact', '--json'], target.url),
      idemCli(['stats', '--json'], target.url),
      idemCli(['stats', '--estimate'], target.url),
    ]);
    for (const run of [estimated, exact, auto, text]) expect(run.code, run.stderr).toBe(0);
    const e = JSON.parse(estimated.stdout);
    const x = JSON.parse(exact.stdout);
    expect(x.counts).toEqual({ kind: 'count' });
    expect(JSON.parse(auto.stdout).counts).toEqual({ kind: 'count' });
    expect(e.counts).toMatchObject({ kind: 'statistics', rows: ROWS, missingStatistics: null });
    expect(Date.parse(e.counts.analyzedAt)).toBeGreaterThan(Date.now() - 600_000);
    expect(x.states).toEqual({ processing: 6667, completed: 20000, released: 6667, resumable: 0, archived: 6666 });
    const near = (a: number, b: number) => Math.abs(a - b) <= Math.max(20, b * 0.03);
    for (const state of ['processing', 'completed', 'released', 'archived'])
      expect(near(e.states[state], x.states[state]), `${state}: ${e.states[state]} vs ${x.states[state]}`).toBe(true);
    expect(e.operations.map((o: { operation: string }) => o.operation)).toEqual(
      x.operations.map((o: { operation: string }) => o.operation),
    );
    for (const [index, each] of x.operations.entries())
      for (const state of ['processing', 'completed', 'released', 'archived'])
        expect(near(e.operations[index][state], each[state]), `${each.operation} ${state}`).toBe(true);
    expect(e.takeoversLastDay).toBe(40);
    expect(text.stdout).toContain(
      `counts by state and operation: estimated from PostgreSQL's planner statistics (~${ROWS} rows`,
    );
  });

  it('without the statistics object (tables from your own migrations): states estimated, operations missing, the SQL to add said', async () => {
    await target.run('DROP STATISTICS idem_keys_operation_state');
    try {
      const run = await idemCli(['stats', '--estimate', '--json'], target.url);
      expect(run.code, run.stderr).toBe(0);
      const stats = JSON.parse(run.stdout);
      expect(stats.operations).toEqual([]);
      expect(stats.counts.missingStatistics).toMatch(
        /^CREATE STATISTICS IF NOT EXISTS "idem_keys_operation_state" \(mcv\) ON "state"/,
      );
      expect(stats.states.completed).toBeGreaterThan(19_000);
    } finally {
      await target.run(
        `CREATE STATISTICS IF NOT EXISTS idem_keys_operation_state (mcv) ON state, (substr(scope, strpos(scope, '/') + 1)) FROM idem_keys`,
      );
      await target.run('ANALYZE idem_keys');
    }
  });

  it('more operations than the statistics keep: the rest of each state is one row, (other operations)', async () => {
    // 240 more (operation, state) combinations than the default statistics target's 100 values.
    await target.run(`INSERT INTO idem_keys (scope, key, generation, state, token, created_at, lease_until, expires_at)
      SELECT 'acct_1/op' || (i % 60) || '.create', 'many' || i, 1,
             (ARRAY['completed', 'processing', 'released', 'archived'])[1 + (i / 60) % 4],
             md5(i::text), now(), now() + interval '1 minute', now() + interval '1 day'
      FROM generate_series(1, 24000) AS i`);
    await target.run('ANALYZE idem_keys');
    const run = await idemCli(['stats', '--estimate', '--json'], target.url);
    expect(run.code, run.stderr).toBe(0);
    const stats = JSON.parse(run.stdout);
    const other = stats.operations.at(-1);
    expect(other.operation).toBe('(other operations)');
    for (const state of ['processing', 'completed', 'released', 'archived']) {
      const sum = stats.operations.reduce((total: number, each: Record<string, number>) => total + each[state]!, 0);
      expect(Math.abs(sum - stats.states[state]), state).toBeLessThanOrEqual(stats.operations.length);
    }
  });

  it('the takeovers of the last day read the partial index idem_keys_takeover_idx (EXPLAIN), not the table', async () => {
    // The statement stats sends, as it sends it.
    const db = target.db as AnyPgDatabase;
    const { takeovers } = statsQueries({ dialect: 'postgres', db } as OpenedDatabase, DEFAULT_TABLE_NAMES);
    const plan = await db.execute(sql`EXPLAIN (FORMAT JSON) ${takeovers}`);
    const text = JSON.stringify(plan);
    expect(text).toContain('idem_keys_takeover_idx');
    expect(text).not.toContain('Seq Scan');
  });
});
