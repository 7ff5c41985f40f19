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
    { leaseMs = 30_000, retentionMs = 3_600_000, complete = true } = {},
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
      expect(await store.complete({ scope, key, token, outcome: { kind: 'success', status: 200, body: '{}' } })).toBe(
        true,
      );
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
    'stats counts per state and per operation, the oldest claim past its lease, expired not swept; --json the same',
    async () => {
      await record('payments.create');
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
        states: { processing: 1, completed: 3, released: 0, archived: 0 },
        operations: [
          { operation: 'payments.create', processing: 0, completed: 2, released: 0, archived: 0 },
          { operation: 'refunds.create', processing: 1, completed: 1, released: 0, archived: 0 },
        ],
        oldestProcessing: { scope: stuck, pastLease: true },
        takeoversLastDay: 0,
        expiredNotSwept: 1, // the 1 ms retention; the stuck claim's retention (1 h) still runs
        archived: 0,
        history: 0,
      });
      expect(text.stdout).toMatch(/^processing +1$/m);
      expect(text.stdout).toMatch(/^refunds\.create +1 +1 +0 +0$/m);
      expect(text.stdout).toContain(`oldest processing claim: ${stuck}, first seen `);
      expect(text.stdout).toContain('(past its lease: idem doctor)');
      expect(text.stdout).toMatch(/^expired, not swept: 1 \(the oldest expired at \S+Z\)$/m);
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
