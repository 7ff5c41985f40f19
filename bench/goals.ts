/**
 * Issue 34's goals, computed from one run's `http` and `pgbench` parts (`npm run bench -- --only
 * http,pgbench`): each goal with the figures it compares and whether this run met it. Ratios are
 * of the medians over rounds, within this run.
 */
import type { HttpResult, HttpRow } from './http.ts';
import type { PgbenchResult } from './pgbench.ts';

/** pgbench's grouped rows: requests per statement, clients, requests/s. */
interface GroupCeiling {
  size: number;
  clients: number;
  requestsPerSecond: number;
  /** The machine's and PostgreSQL's CPU per request during that pgbench run, µs (pgbench.sh's last column). */
  machineCpuMicros?: number;
  databaseCpuMicros?: number;
}

function groupCeilings(pgbench: PgbenchResult): GroupCeiling[] {
  return pgbench.rows.flatMap((row) => {
    const found = /completion group, (\d+) requests per statement \| (\d+) \| (\d+) requests\/s/.exec(row);
    if (!found) return [];
    const cpu = /\| (\d+) \((\d+)\) \|$/.exec(row.trim());
    return [
      {
        size: Number(found[1]),
        clients: Number(found[2]),
        requestsPerSecond: Number(found[3]),
        ...(cpu ? { machineCpuMicros: Number(cpu[1]), databaseCpuMicros: Number(cpu[2]) } : {}),
      },
    ];
  });
}

const round = (n: number) => Math.round(n).toLocaleString('en-US');

/**
 * Where a row's machine CPU per request goes: the server (its process), the database, the load
 * generator, and the rest (kernel networking, anything else running).
 */
function budget(row: HttpRow | undefined): string {
  if (!row?.cpu) return '';
  const { machineCpuMicros: all, databaseCpuMicros: database, loadCpuMicros: load } = row.cpu;
  const rest = Math.max(0, all - row.serverCpuMicros - database - load);
  return `${round(all)} µs (server ${round(row.serverCpuMicros)}, database ${round(database)}, load generator ${round(load)}, rest ${round(rest)})`;
}

/**
 * A comparison's CPU explanation: each side's machine CPU per request, and the ratio the cores
 * allow (theirs over ours): with every core busy, req/s is inversely proportional to it.
 */
function cpuVersus(ours: HttpRow | undefined, theirs: HttpRow | undefined, name: string): string {
  if (!ours?.cpu || !theirs?.cpu) return '';
  const allowed = theirs.cpu.machineCpuMicros / ours.cpu.machineCpuMicros;
  return `; machine CPU per request ${budget(ours)} against ${name}'s ${budget(theirs)}: at most ${allowed.toFixed(2)}× with every core busy`;
}

export function renderGoals(http: HttpResult, pgbench: PgbenchResult | undefined): string {
  const row = (variant: string, mode: 'fresh' | 'replay', connections: number): HttpRow | undefined =>
    http.rows.find((r) => r.variant === variant && r.mode === mode && r.connections === connections);
  const lines: string[][] = [];
  const fixed = (n: number, digits = 2) => n.toFixed(digits);
  const verdict = (met: boolean | undefined) => (met === undefined ? 'not measured' : met ? 'met' : '**missed**');
  const goal = (name: string, figures: string, met: boolean | undefined) => lines.push([name, figures, verdict(met)]);
  const atLeast = (r: number | undefined, bound: number) => (r === undefined ? undefined : r >= bound);
  const versus = (a: HttpRow | undefined, b: HttpRow | undefined) =>
    a && b ? a.requestsPerSecond / b.requestsPerSecond : undefined;

  for (const [db, p50Goal, bareGoal] of [
    ['PostgreSQL', 1.0, 0.1],
    ['SQLite', 0.22, 0.45],
  ] as const) {
    const fresh = row(`idem engine, ${db}`, 'fresh', 1);
    const bare = row('bare', 'fresh', 1);
    goal(
      `1 connection, ${db}: fresh p50 ≤ ${p50Goal} ms`,
      fresh
        ? `${fixed(fresh.p50Ms)} ms; server CPU per request ${round(fresh.serverCpuMicros)} µs (bare handler ${bare ? round(bare.serverCpuMicros) : '?'} µs)${fresh.cpu ? `, database ${round(fresh.cpu.databaseCpuMicros)} µs` : ''}`
        : '',
      fresh && fresh.p50Ms <= p50Goal,
    );
    goal(
      `1 connection, ${db}: fresh ≥ ${bareGoal}× the bare handler`,
      fresh ? `${fixed(fresh.ratioToBare)}× (median of per-round ratios)` : '',
      fresh && fresh.ratioToBare >= bareGoal,
    );
  }

  const pgFresh = row('idem engine, PostgreSQL', 'fresh', 64);
  for (const ceiling of groupCeilings(pgbench ?? { rows: [] })) {
    const r = pgFresh && pgFresh.requestsPerSecond / ceiling.requestsPerSecond;
    const cpu =
      pgFresh?.cpu && ceiling.machineCpuMicros !== undefined
        ? `; machine CPU per request ${budget(pgFresh)} against pgbench's ${round(ceiling.machineCpuMicros)} µs (PostgreSQL ${round(ceiling.databaseCpuMicros ?? 0)})`
        : '';
    goal(
      `64, PostgreSQL: fresh ≥ 0.6× the grouped ceiling (pgbench, ${ceiling.size} per statement, ${ceiling.clients} clients)`,
      r === undefined
        ? ''
        : `${Math.round(pgFresh!.requestsPerSecond)} / ${ceiling.requestsPerSecond} = ${fixed(r)}×${cpu}`,
      r === undefined ? undefined : r >= 0.6,
    );
  }
  const powertoolsFresh = row('powertools, Redis', 'fresh', 64);
  const r1 = versus(pgFresh, powertoolsFresh);
  goal(
    '64, PostgreSQL: fresh ≥ 0.66× powertools on Redis',
    r1 === undefined ? '' : `${fixed(r1)}×${cpuVersus(pgFresh, powertoolsFresh, 'powertools')}`,
    atLeast(r1, 0.66),
  );
  for (const variant of ['idem engine, PostgreSQL', 'idem engine, PostgreSQL, local cache']) {
    const ours = row(variant, 'replay', 64);
    const theirs = row('powertools, Redis', 'replay', 64);
    const r = versus(ours, theirs);
    goal(
      `64, PostgreSQL: replays ≥ 1.0× powertools on Redis (${variant})`,
      r === undefined ? '' : `${fixed(r)}×${cpuVersus(ours, theirs, 'powertools')}`,
      atLeast(r, 1.0),
    );
  }
  for (const [withIdem, bare] of [
    ['tRPC + idem, PostgreSQL', 'tRPC bare, PostgreSQL'],
    ['hono + idem, PostgreSQL', 'hono bare, PostgreSQL'],
    ['tRPC + idem, PostgreSQL, atomic', 'tRPC bare, PostgreSQL'],
    ['hono + idem, PostgreSQL, atomic', 'hono bare, PostgreSQL'],
  ] as const) {
    const a = row(withIdem, 'fresh', 64);
    const b = row(bare, 'fresh', 64);
    goal(
      `64: ${withIdem} ≥ 0.8× ${bare}`,
      a?.ratioToRouteBare === undefined
        ? ''
        : `${fixed(a.ratioToRouteBare)}× (median of per-round ratios)${cpuVersus(a, b, 'the route without idem')}`,
      a?.ratioToRouteBare === undefined ? undefined : a.ratioToRouteBare >= 0.8,
    );
    const p99 = a && b ? a.p99Ms / b.p99Ms : undefined;
    goal(
      `64: ${withIdem} p99 within 1.5× of ${bare}`,
      p99 === undefined ? '' : `${fixed(a!.p99Ms, 1)} / ${fixed(b!.p99Ms, 1)} ms = ${fixed(p99)}×`,
      p99 === undefined ? undefined : p99 <= 1.5,
    );
  }
  const sqliteFresh = row('idem engine, SQLite', 'fresh', 64);
  const nodeIdempotencyFresh = row('node-idempotency, Redis', 'fresh', 64);
  const r2 = versus(sqliteFresh, nodeIdempotencyFresh);
  goal(
    '64, SQLite: fresh ≥ 1.0× @node-idempotency on Redis',
    r2 === undefined ? '' : `${fixed(r2)}×${cpuVersus(sqliteFresh, nodeIdempotencyFresh, '@node-idempotency')}`,
    atLeast(r2, 1.0),
  );
  for (const route of ['tRPC', 'hono'] as const) {
    const r = versus(
      row(`${route} + idem, PostgreSQL, atomic`, 'fresh', 64),
      row(`${route} + idem, PostgreSQL`, 'fresh', 64),
    );
    lines.push([
      `64, PostgreSQL: ${route} + idem, atomic mode against the default`,
      r === undefined ? '' : `${fixed(r)}×`,
      'reported',
    ]);
  }

  const header = '| goal (issue 34) | this run | verdict |\n| --- | --- | --- |';
  return `### Issue 34 goals, this run (ratios of medians unless said)\n\n${header}\n${lines.map((cells) => `| ${cells.join(' | ')} |`).join('\n')}`;
}
