/**
 * E1 and R2 across processes: several OS processes, each with its own connections, claim one
 * key together (released at once when all are ready, and each kept claiming until all have
 * started); exactly one wins.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { createDrizzleStore, migrate, type DrizzleDatabase } from '../src/index.ts';
import { DRIVERS, type ChildTarget } from './drivers.ts';
import type { RaceChildConfig, RaceChildReport } from './race-child.ts';
import { mysqlSuitesRun, openMysqlTarget } from './mysql-target.ts';
import { claimed } from './store-behaviour.ts';
import { waitPast } from '../../../test/support/waiting.ts';

const CHILD = fileURLToPath(new URL('./race-child.ts', import.meta.url));
const PROCESSES = 3;
const CLAIMS_PER_PROCESS = 20;
/** Bounds a hung race: on a loaded machine three children (node + tsx) take a while to start. */
const RACE_TIMEOUT_MS = 120_000;

/** Spawns the contenders, releases them together, and sums their reports. */
async function race(
  config: Omit<RaceChildConfig, 'claims'>,
  claimsPerProcess = CLAIMS_PER_PROCESS,
): Promise<RaceChildReport> {
  const children = Array.from({ length: PROCESSES }, () => {
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', CHILD, JSON.stringify({ ...config, claims: claimsPerProcess })],
      {
        stdio: ['pipe', 'pipe', 'pipe'],
      },
    );
    let stderr = '';
    child.stderr.on('data', (chunk) => (stderr += chunk));
    const lines: string[] = [];
    let heard: (() => void) | undefined;
    createInterface({ input: child.stdout }).on('line', (line) => {
      lines.push(line);
      heard?.();
    });
    // 'close': the child exited and its output has been read to the end.
    const closed = new Promise<number | null>((resolve) => child.once('close', resolve));
    const failed = closed.then((code) => {
      throw new Error(`child exited (${code}) early: ${stderr}`);
    });
    failed.catch(() => {});
    /** Resolves once the child has printed `line` (or fails when it exits first). */
    const says = (line: string) =>
      Promise.race([
        failed,
        new Promise<void>((resolve) => {
          const check = () => (lines.includes(line) ? resolve() : void (heard = check));
          check();
        }),
      ]);
    const report = closed.then((code) => {
      if (code !== 0) throw new Error(`child failed (${code}): ${stderr}`);
      return JSON.parse(lines.at(-1)!) as RaceChildReport;
    });
    return { child, says, report };
  });
  try {
    await Promise.all(children.map(({ says }) => says('ready')));
    for (const { child } of children) child.stdin.write('go\n');
    // Every child has sent its burst before any sends the rest: their claims overlap.
    await Promise.all(children.map(({ says }) => says('started')));
    for (const { child } of children) child.stdin.end('finish\n');
    const reports = await Promise.all(children.map(({ report }) => report));
    return reports.reduce((sum, report) => ({
      claimed: sum.claimed + report.claimed,
      existing: sum.existing + report.existing,
      owners: [...sum.owners, ...report.owners],
      generations: [...sum.generations, ...report.generations],
      errors: [...sum.errors, ...report.errors],
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
function describeRaces(
  label: string,
  open: () => Promise<{ db: DrizzleDatabase; child: ChildTarget; close(): Promise<void> }>,
) {
  const claims = PROCESSES * CLAIMS_PER_PROCESS;
  it(`E1: exactly one of ${claims} concurrent claims from ${PROCESSES} processes wins (${label})`, {
    timeout: RACE_TIMEOUT_MS,
  }, async () => {
    const target = await open();
    try {
      await migrate(target.db);
      const total = await race({ target: target.child, scope: 'race', key: randomUUID() });
      expectOneWinner(total, claims, 1);
    } finally {
      await target.close();
    }
  });

  // With grouping off too, on one driver per dialect.
  if (label === 'node-postgres' || label === 'better-sqlite3' || label === 'MySQL') {
    it(`E1: exactly one of ${claims} concurrent claims from ${PROCESSES} processes wins with groupCommit: false (${label})`, {
      timeout: RACE_TIMEOUT_MS,
    }, async () => {
      const target = await open();
      try {
        await migrate(target.db);
        const total = await race({ target: target.child, scope: 'race', key: randomUUID(), groupCommit: false });
        expectOneWinner(total, claims, 1);
      } finally {
        await target.close();
      }
    });
  }

  const reuses = PROCESSES * 10;
  it(`R2: exactly one of ${reuses} concurrent reuses of an expired key from ${PROCESSES} processes makes generation 2, with one history row (${label})`, {
    timeout: RACE_TIMEOUT_MS,
  }, async () => {
    const target = await open();
    try {
      await migrate(target.db);
      const store = createDrizzleStore(target.db);
      const key = randomUUID();
      const first = {
        scope: 'race',
        key,
        fingerprint: 'race',
        token: randomUUID(),
        leaseMs: 1,
        retentionMs: 1,
        expiredReuse: 'execute' as const,
      };
      const { record } = claimed(await store.claim(first));
      await store.complete({
        scope: 'race',
        key,
        token: first.token,
        outcome: { kind: 'success', status: 200, body: '1' },
      });
      // Retention counts from completion: wait out the expiry the store holds now.
      await waitPast((await store.get('race', key))?.expiresAt ?? record.expiresAt);
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

const mysqlServer = await mysqlSuitesRun();

describe('claims racing across processes', () => {
  for (const spec of DRIVERS) {
    if (!spec.runs) {
      describe.skip(`${spec.name} (no PostgreSQL server reachable)`, () => {});
      continue;
    }
    if (spec.name === 'pglite') continue;
    describeRaces(spec.name, async () => {
      const target = await spec.open({ max: 2 });
      if (!target.child) throw new Error(`[idem] ${spec.name} cannot be opened from another process`);
      return { db: target.db, child: target.child, close: () => target.close() };
    });
  }

  describe.skipIf(!mysqlServer)('on a MySQL server (mysql2)', () => {
    describeRaces('MySQL', async () => {
      const target = await openMysqlTarget({ connectionLimit: 2, prefix: 'idem_race_test' });
      return {
        db: target.db,
        child: { driver: 'mysql2', url: target.url, connections: 8 },
        close: () => target.close(),
      };
    });
  });
});

/**
 * PGlite is PostgreSQL inside one process, on one connection: no second process can open its
 * database (its data directory belongs to the process that runs it). Its race is among the
 * concurrent claims of that process.
 */
describe('claims racing on PGlite, in its one process', () => {
  const claims = PROCESSES * CLAIMS_PER_PROCESS;
  // PGlite is PostgreSQL compiled to WebAssembly: starting it and 60 claims took over 30 s under `npm run test:loaded`.
  it(`E1: exactly one of ${claims} concurrent claims of one key wins (pglite)`, { timeout: 180_000 }, async () => {
    const target = await DRIVERS.find((spec) => spec.name === 'pglite')!.open();
    try {
      await migrate(target.db);
      const store = createDrizzleStore(target.db);
      const key = randomUUID();
      const results = await Promise.all(
        Array.from({ length: claims }, () =>
          store.claim({
            scope: 'race',
            key,
            fingerprint: 'race',
            token: randomUUID(),
            leaseMs: 60_000,
            retentionMs: 60_000,
            expiredReuse: 'execute',
          }),
        ),
      );
      expectOneWinner(
        {
          claimed: results.filter((result) => result.outcome === 'claimed').length,
          existing: results.filter((result) => result.outcome === 'existing').length,
          owners: results.map((result) => result.record.token),
          generations: results.map((result) => result.record.generation),
          errors: [],
        },
        claims,
        1,
      );
    } finally {
      await target.close();
    }
  });
});
