/**
 * E1 and R2 across processes: several OS processes, each with its own connections, claim one
 * key at the same moment (a start time handed out once all are ready); exactly one wins.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { createDrizzleStore, migrate, type DrizzleDatabase } from '../src/index.ts';
import { isServerReachable, openPostgresTarget, postgresRequired } from './pg-target.ts';
import type { RaceChildConfig, RaceChildReport } from './race-child.ts';
import { openSqliteTarget } from './sqlite-target.ts';
import { mysqlSuitesRun, openMysqlTarget } from './mysql-target.ts';
import { claimed, sleep } from './store-behaviour.ts';

const CHILD = fileURLToPath(new URL('./race-child.ts', import.meta.url));
const PROCESSES = 3;
const CLAIMS_PER_PROCESS = 20;
const RACE_TIMEOUT_MS = 30_000;

/** Spawns the contenders, releases them together, and sums their reports. */
async function race(config: Omit<RaceChildConfig, 'claims'>, claimsPerProcess = CLAIMS_PER_PROCESS): Promise<RaceChildReport> {
  const children = Array.from({ length: PROCESSES }, () => {
    const child = spawn(process.execPath, ['--import', 'tsx', CHILD, JSON.stringify({ ...config, claims: claimsPerProcess })], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (chunk) => (stderr += chunk));
    const lines = createInterface({ input: child.stdout });
    const ready = new Promise<void>((resolve, reject) => {
      lines.once('line', (line) => (line === 'ready' ? resolve() : reject(new Error(`unexpected: ${line}`))));
      child.once('exit', (code) => reject(new Error(`child exited early (${code}): ${stderr}`)));
    });
    const report = new Promise<RaceChildReport>((resolve, reject) => {
      let last = '';
      lines.on('line', (line) => (last = line));
      child.once('exit', (code) => (code === 0 ? resolve(JSON.parse(last) as RaceChildReport) : reject(new Error(`child failed (${code}): ${stderr}`))));
    });
    return { child, ready, report };
  });
  try {
    await Promise.all(children.map(({ ready }) => ready));
    const startAt = Date.now() + 100;
    for (const { child } of children) child.stdin.end(`${startAt}\n`);
    const reports = await Promise.all(children.map(({ report }) => report));
    // The race only means something if every process was claiming while the others were.
    const latestStart = Math.max(...reports.map((report) => report.window[0]));
    const earliestEnd = Math.min(...reports.map((report) => report.window[1]));
    expect(latestStart, 'the processes claimed at overlapping times').toBeLessThanOrEqual(earliestEnd);
    return reports.reduce((sum, report) => ({
      claimed: sum.claimed + report.claimed,
      existing: sum.existing + report.existing,
      owners: [...sum.owners, ...report.owners],
      generations: [...sum.generations, ...report.generations],
      errors: [...sum.errors, ...report.errors],
      window: [Math.min(sum.window[0], report.window[0]), Math.max(sum.window[1], report.window[1])],
    }));
  } finally {
    for (const { child } of children) if (child.exitCode === null) child.kill();
  }
}

function expectOneWinner(total: RaceChildReport, claims: number, generation: number) {
  expect(total.errors).toEqual([]);
  expect(total.claimed).toBe(1);
  expect(total.existing).toBe(claims - 1);
  expect(new Set(total.owners).size).toBe(1);
  expect(new Set(total.generations)).toEqual(new Set([generation]));
}

/** The same two races on each dialect. */
function describeRaces(label: string, open: () => Promise<{ db: DrizzleDatabase; child: RaceChildConfig['target']; close(): Promise<void> }>) {
  const claims = PROCESSES * CLAIMS_PER_PROCESS;
  it(`E1: exactly one of ${claims} concurrent claims from ${PROCESSES} processes wins (${label})`, { timeout: RACE_TIMEOUT_MS }, async () => {
    const target = await open();
    try {
      await migrate(target.db);
      const total = await race({ target: target.child, scope: 'race', key: randomUUID() });
      expectOneWinner(total, claims, 1);
    } finally {
      await target.close();
    }
  });

  const reuses = PROCESSES * 10;
  it(`R2: exactly one of ${reuses} concurrent reuses of an expired key from ${PROCESSES} processes makes generation 2, with one history row (${label})`, { timeout: RACE_TIMEOUT_MS }, async () => {
    const target = await open();
    try {
      await migrate(target.db);
      const store = createDrizzleStore(target.db);
      const key = randomUUID();
      const first = { scope: 'race', key, fingerprint: 'race', token: randomUUID(), leaseMs: 1, retentionMs: 1, expiredReuse: 'execute' as const };
      claimed(await store.claim(first));
      await store.complete({ scope: 'race', key, token: first.token, outcome: { kind: 'success', status: 200, body: '1' } });
      await sleep(15);
      const total = await race({ target: target.child, scope: 'race', key }, 10);
      expectOneWinner(total, reuses, 2);
      const timeline = await store.timeline('race', key);
      expect(timeline.map((entry) => [entry.generation, entry.reusedAt === null])).toEqual([
        [1, false],
        [2, true],
      ]);
    } finally {
      await target.close();
    }
  });
}

const server = (await isServerReachable()) || postgresRequired();
const mysqlServer = await mysqlSuitesRun();

describe('claims racing across processes', () => {
  describeRaces('SQLite WAL', async () => {
    const target = await openSqliteTarget();
    return { db: target.db, child: { dialect: 'sqlite', file: target.file }, close: () => target.close() };
  });

  describe.skipIf(!server)('on a PostgreSQL server (PGlite cannot be shared between processes)', () => {
    describeRaces('PostgreSQL', async () => {
      const target = await openPostgresTarget({ max: 2 });
      if (!target.url) throw new Error('[idem] the race needs a PostgreSQL server');
      return { db: target.db, child: { dialect: 'postgres', url: target.url, connections: 8 }, close: () => target.close() };
    });
  });

  describe.skipIf(!mysqlServer)('on a MySQL server (mysql2)', () => {
    describeRaces('MySQL', async () => {
      const target = await openMysqlTarget({ connectionLimit: 2, prefix: 'idem_race_test' });
      return { db: target.db, child: { dialect: 'mysql', url: target.url, connections: 8 }, close: () => target.close() };
    });
  });
});
