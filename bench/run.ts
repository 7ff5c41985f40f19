/**
 * `npm run bench [-- --only floor,http,scale,memory,commits,status,pgbench,renewals,wait] [-- --quick]`: runs the parts in sequence,
 * (`--stores sqlite,postgres` narrows the floor's drivers; `--baseline <dir>` times another build
 * beside this one in the floor's rounds and the renewals part's fresh path, see bench/README.md),
 * prints their tables and writes everything to bench/results/<date>.json.
 * Needs PostgreSQL at DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test) and, for
 * the HTTP part, Redis at REDIS_URL (default redis://127.0.0.1:6379). The floor part runs on
 * MySQL too when it answers at MYSQL_URL (default mysql://root@127.0.0.1:3306/test).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { cpus, loadavg, totalmem } from 'node:os';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { createClient } from '@redis/client';
import {
  adminQuery,
  MYSQL_URL,
  mysqlVersion,
  openBenchSqlite,
  postgresReachable,
  POSTGRES_URL,
  REDIS_URL,
} from './databases.ts';
import { renderCommits, runCommits } from './commits.ts';
import { runFloor, type FloorStore } from './floor.ts';
import { renderGoals } from './goals.ts';
import { runHttp, type HttpResult } from './http.ts';
import { renderPgbench, runPgbench, type PgbenchResult } from './pgbench.ts';
import { renderKeyStatus, runKeyStatus } from './key-status.ts';
import { runMemory } from './memory.ts';
import { renderFloor, renderHttp, renderMachine, renderMemory, renderScale, type MachineNotes } from './report.ts';
import { runScale } from './scale.ts';
import { renderRenewals, renderWait, runRenewals, runWait } from './renewals.ts';

const PARTS = ['floor', 'http', 'scale', 'memory', 'commits', 'status', 'pgbench', 'renewals', 'wait'] as const;
type Part = (typeof PARTS)[number];
const STORES = ['sqlite', 'postgres'] as const;
/** The floor also runs on the other drivers: libsql (a SQLite file) and postgres-js (and mysql2 when MySQL answers). */
const FLOOR_STORES = ['sqlite', 'libsql', 'postgres', 'postgres-js'] as const;

const { values } = parseArgs({
  options: {
    only: { type: 'string' },
    quick: { type: 'boolean', default: false },
    // The floor part, side by side with another build of @idem/core and @idem/drizzle (see README).
    baseline: { type: 'string' },
    // The floor part on some of its drivers only: sqlite, libsql, postgres, postgres-js, mysql.
    stores: { type: 'string' },
    // The floor's rounds per variant (default 41): more narrow the spread on a loaded machine.
    rounds: { type: 'string' },
  },
});
const only = (values.only ?? PARTS.join(','))
  .split(',')
  .map((part) => part.trim())
  .filter(Boolean);
const unknown = only.filter((part) => !(PARTS as readonly string[]).includes(part));
if (unknown.length > 0) {
  console.error(`[bench] unknown part(s) ${unknown.join(', ')}; choose from ${PARTS.join(', ')}`);
  process.exit(2);
}
const parts = PARTS.filter((part) => only.includes(part));
const quick = values.quick ?? false;

if (!(await postgresReachable())) {
  console.error(`[bench] PostgreSQL is not reachable at ${POSTGRES_URL} (set DATABASE_URL)`);
  process.exit(1);
}

const started = Date.now();
const machine = await machineNotes();
console.log(
  `## idem benchmarks${quick ? ' (--quick: fewer rounds, smaller tables — for development, not for the README)' : ''}\n`,
);
console.log(renderMachine(machine));

const results: Partial<Record<Part, unknown>> & { seconds?: Partial<Record<Part, number>> } = { seconds: {} };
for (const part of parts) {
  const partStarted = Date.now();
  console.log(`\n[bench] ${part}…`);
  let section: string;
  switch (part) {
    case 'floor': {
      const available: FloorStore[] = machine.mysql === 'unreachable' ? [...FLOOR_STORES] : [...FLOOR_STORES, 'mysql'];
      const chosen = values.stores?.split(',').map((store) => store.trim());
      const result = await runFloor({
        quick,
        stores: chosen ? available.filter((store) => chosen.includes(store)) : available,
        baseline: values.baseline,
        rounds: values.rounds === undefined ? undefined : Number(values.rounds),
      });
      results.floor = result;
      section = renderFloor(result);
      break;
    }
    case 'http': {
      const result = await runHttp({ quick });
      results.http = result;
      section = renderHttp(result);
      break;
    }
    case 'scale': {
      const result = await runScale({ quick, stores: STORES });
      results.scale = result;
      section = renderScale(result);
      break;
    }
    case 'memory': {
      const result = await runMemory({ quick, stores: STORES });
      results.memory = result;
      section = renderMemory(result);
      break;
    }
    case 'commits': {
      const result = await runCommits({ quick });
      results.commits = result;
      section = renderCommits(result);
      break;
    }
    case 'pgbench': {
      const result = runPgbench({ quick });
      results.pgbench = result;
      section = renderPgbench(result);
      break;
    }
    case 'renewals': {
      const result = await runRenewals({ quick, baseline: values.baseline });
      results.renewals = result;
      section = renderRenewals(result);
      break;
    }
    case 'wait': {
      const result = await runWait({ quick });
      results.wait = result;
      section = renderWait(result);
      break;
    }
    case 'status': {
      const result = await runKeyStatus({ quick, stores: STORES });
      results.status = result;
      section = renderKeyStatus(result);
      break;
    }
  }
  results.seconds![part] = (Date.now() - partStarted) / 1000;
  console.log(`\n${section}\n`);
}

if (results.http)
  console.log(`\n${renderGoals(results.http as HttpResult, results.pgbench as PgbenchResult | undefined)}\n`);

const totalSeconds = (Date.now() - started) / 1000;
const loadAverageAtEnd = loadavg();
console.log(
  `[bench] load average (1/5/15 min) at the end: ${loadAverageAtEnd.map((load) => load.toFixed(2)).join(' / ')}`,
);
const directory = fileURLToPath(new URL('./results/', import.meta.url));
mkdirSync(directory, { recursive: true });
const file = `${directory}${machine.date.replaceAll(':', '-')}${quick ? '-quick' : ''}.json`;
writeFileSync(
  file,
  `${JSON.stringify({ machine, loadAverageAtEnd, quick, parts, totalSeconds, ...results }, null, 2)}\n`,
);
console.log(`[bench] ${parts.join(', ')} in ${Math.round(totalSeconds)} s; results in ${file}`);

async function machineNotes(): Promise<MachineNotes> {
  const sqlite = await openBenchSqlite({ migrated: false });
  const sqliteVersion = (sqlite.client.prepare('SELECT sqlite_version() AS v').get() as { v: string }).v;
  await sqlite.close();
  const postgres = String((await adminQuery('SHOW server_version')).rows[0]?.server_version ?? '?');
  const mysql = await mysqlVersion();
  if (mysql === undefined)
    console.warn(`[bench] MySQL is not reachable at ${MYSQL_URL} (set MYSQL_URL): the floor part skips it`);
  let redis = 'unreachable';
  try {
    const client = await createClient({ url: REDIS_URL }).connect();
    redis = /redis_version:(\S+)/.exec(await client.info('server'))?.[1] ?? '?';
    await client.quit();
  } catch {
    // The HTTP part reports the failure where it needs Redis.
  }
  return {
    date: `${new Date().toISOString().slice(0, 19)}Z`,
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model.trim() ?? '?',
    memoryGiB: totalmem() / 1024 ** 3,
    loadAverage: loadavg(),
    node: process.version,
    postgres,
    sqlite: `${sqliteVersion} (better-sqlite3 ${packageVersion('better-sqlite3')})`,
    mysql: mysql === undefined ? 'unreachable' : `${mysql} (mysql2 ${packageVersion('mysql2')})`,
    redis,
  };
}

function packageVersion(name: string): string {
  return (createRequire(import.meta.url)(`${name}/package.json`) as { version: string }).version;
}
