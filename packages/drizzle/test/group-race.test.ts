/**
 * E1 across processes under group commit: three processes claim the same 16 keys, each key four
 * times per process, all at once, so that every process sends groups that collide with the
 * others' groups (and hold duplicates of their own); exactly one claim wins each key.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { createDrizzleStore, migrate } from '../src/index.ts';
import { DRIVERS, type ChildTarget } from './drivers.ts';
import type { GroupRaceConfig, GroupRaceReport } from './group-race-child.ts';
import { mysqlSuitesRun, openMysqlTarget } from './mysql-target.ts';

const CHILD = fileURLToPath(new URL('./group-race-child.ts', import.meta.url));
const PROCESSES = 3;
const KEYS = 16;
const ROUNDS = 4;
const RACE_TIMEOUT_MS = 120_000;

async function race(config: GroupRaceConfig): Promise<GroupRaceReport[]> {
  const children = Array.from({ length: PROCESSES }, () => {
    const child = spawn(process.execPath, ['--import', 'tsx', CHILD, JSON.stringify(config)], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (chunk) => (stderr += chunk));
    const lines: string[] = [];
    let heard: (() => void) | undefined;
    createInterface({ input: child.stdout }).on('line', (line) => {
      lines.push(line);
      heard?.();
    });
    const closed = new Promise<number | null>((resolve) => child.once('close', resolve));
    const ready = new Promise<void>((resolve, reject) => {
      const check = () => (lines.includes('ready') ? resolve() : void (heard = check));
      check();
      closed.then((code) => reject(new Error(`child exited (${code}) early: ${stderr}`)));
    });
    const report = closed.then((code) => {
      if (code !== 0) throw new Error(`child failed (${code}): ${stderr}`);
      return JSON.parse(lines.at(-1)!) as GroupRaceReport;
    });
    report.catch(() => {});
    return { child, ready, report };
  });
  try {
    await Promise.all(children.map(({ ready }) => ready));
    for (const { child } of children) child.stdin.end('go\n');
    return await Promise.all(children.map(({ report }) => report));
  } finally {
    for (const { child } of children) if (child.exitCode === null) child.kill();
  }
}

function describeRace(
  label: string,
  open: () => Promise<{ db: Parameters<typeof migrate>[0]; child: ChildTarget; close(): Promise<void> }>,
) {
  it(`E1: exactly one winner for each of ${KEYS} keys claimed ${ROUNDS} times by each of ${PROCESSES} processes, in groups (${label})`, {
    timeout: RACE_TIMEOUT_MS,
  }, async () => {
    const target = await open();
    try {
      await migrate(target.db);
      const keys = Array.from({ length: KEYS }, (_, i) => `k${i}`);
      const scope = `group-race-${randomUUID()}`;
      const reports = await race({ target: target.child, scope, keys, rounds: ROUNDS });
      expect(reports.flatMap((r) => r.errors)).toEqual([]);
      const store = createDrizzleStore(target.db);
      for (const key of keys) {
        const winners = reports.flatMap((r) => r.won[key] ?? []);
        expect(winners, key).toHaveLength(1);
        const seen = reports.flatMap((r) => r.seen[key] ?? []);
        expect(seen).toHaveLength(PROCESSES * ROUNDS - 1);
        expect(seen.every((owner) => owner === winners[0])).toBe(true);
        const record = await store.get(scope, key);
        expect([record?.token, record?.state]).toEqual([winners[0], 'completed']);
      }
      expect(reports.reduce((sum, r) => sum + r.completed, 0)).toBe(KEYS);
    } finally {
      await target.close();
    }
  });
}

const mysqlServer = await mysqlSuitesRun();

describe('group commit: claims racing across processes', () => {
  for (const spec of DRIVERS.filter((each) => each.dialect === 'sqlite')) {
    describeRace(spec.name, async () => {
      const target = await spec.open();
      return { db: target.db, child: target.child!, close: () => target.close() };
    });
  }
  describe.skipIf(!mysqlServer)('on a MySQL server (mysql2)', () => {
    describeRace('MySQL', async () => {
      const target = await openMysqlTarget({ connectionLimit: 2, prefix: 'idem_group_race_test' });
      return {
        db: target.db,
        child: { driver: 'mysql2', url: target.url, connections: 8 },
        close: () => target.close(),
      };
    });
  });
});
