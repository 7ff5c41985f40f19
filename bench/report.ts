/**
 * The printed result: Markdown tables (readable in a terminal, pasted as they are into
 * bench/README.md), one section per part.
 */
import type { FloorResult, Target } from './floor.ts';
import type { HttpResult } from './http.ts';
import type { MemoryResult } from './memory.ts';
import type { ScaleResult } from './scale.ts';

export interface MachineNotes {
  date: string;
  cpus: number;
  cpuModel: string;
  memoryGiB: number;
  loadAverage: number[];
  node: string;
  postgres: string;
  sqlite: string;
  /** The MySQL server and driver, or `unreachable`. */
  mysql: string;
  redis: string;
}

export function table(headers: readonly string[], rows: ReadonlyArray<readonly string[]>): string {
  const line = (cells: readonly string[]) => `| ${cells.join(' | ')} |`;
  return [line(headers), line(headers.map(() => '---')), ...rows.map(line)].join('\n');
}

const fixed = (value: number, digits: number) => (Number.isFinite(value) ? value.toFixed(digits) : '—');
const micros = (value: number | undefined) =>
  value === undefined ? '—' : value >= 100 ? fixed(value, 0) : fixed(value, 1);
const ratio = (value: number) => `${fixed(value, 2)}×`;
const spread = (r: { median: number; p25: number; p75: number }) =>
  `**${ratio(r.median)}** (${fixed(r.p25, 2)}–${fixed(r.p75, 2)})`;
const verdict = (target: Target) => `${target.met ? 'met' : 'missed'} (≤ ${target.atMost})`;
const STORE_NAMES: Record<string, string> = {
  sqlite: 'SQLite',
  postgres: 'PostgreSQL',
  mysql: 'MySQL',
  libsql: 'SQLite (libsql)',
  'postgres-js': 'PostgreSQL (postgres-js)',
};
const storeName = (store: string) => STORE_NAMES[store] ?? store;
const thousands = (value: number) => Math.round(value).toLocaleString('en-US');

export function renderMachine(notes: MachineNotes): string {
  return table(
    ['date', 'cpus', 'memory', 'load avg (1/5/15 min) at start', 'node', 'PostgreSQL', 'SQLite', 'MySQL', 'Redis'],
    [
      [
        notes.date,
        `${notes.cpus} × ${notes.cpuModel}`,
        `${fixed(notes.memoryGiB, 1)} GiB`,
        notes.loadAverage.map((l) => fixed(l, 2)).join(' / '),
        notes.node,
        notes.postgres,
        notes.sqlite,
        notes.mysql,
        notes.redis,
      ],
    ],
  );
}

export function renderFloor(results: readonly FloorResult[]): string {
  const fresh = table(
    [
      'store',
      '(a) raw claim + complete, µs',
      'Drizzle store claim + complete, µs',
      '(b) engine fresh, µs',
      'store / a',
      '**b / a** (p25–p75)',
      'target',
    ],
    results.map((r) => [
      storeName(r.store),
      micros(r.microsPerOp['raw claim + complete']),
      micros(r.microsPerOp['store claim + complete']),
      micros(r.microsPerOp['engine fresh']),
      ratio(r.ratios['store claim + complete / raw claim + complete']!.median),
      spread(r.ratios['engine fresh / raw claim + complete']!),
      verdict(r.targets.engineFreshVsFloor),
    ]),
  );
  const replay = table(
    [
      'store',
      'raw SELECT by key, µs',
      'raw replay statement (SQLite, MySQL: the read; PostgreSQL: claim-or-read), µs',
      'Drizzle store replay claim, µs',
      '(c) engine replay, µs',
      'raw replay statement / SELECT',
      '**c / SELECT** (p25–p75)',
      'target',
    ],
    results.map((r) => [
      storeName(r.store),
      micros(r.microsPerOp['raw SELECT by key']),
      micros(r.microsPerOp['raw replay statement']),
      micros(r.microsPerOp['store replay (claim)']),
      micros(r.microsPerOp['engine replay']),
      ratio(r.ratios['raw replay statement / raw SELECT by key']!.median),
      spread(r.ratios['engine replay / raw SELECT by key']!),
      verdict(r.targets.replayVsOneStatement),
    ]),
  );
  const shape = results
    .map((r) => `${storeName(r.store)}: ${r.rounds} rounds × ${r.opsPerBatch} ops per variant`)
    .join('; ');
  const compared = results.filter((r) => r.baseline);
  const beside =
    compared.length === 0
      ? ''
      : `\n\nBeside the baseline build, in the same rounds:\n\n${table(
          [
            'store',
            'fresh b / a, baseline',
            'fresh b / a, this build',
            'this / baseline, fresh',
            'replay c / SELECT, baseline',
            'replay c / SELECT, this build',
            'this / baseline, replay',
          ],
          compared.map((r) => [
            storeName(r.store),
            spread(r.ratios['baseline engine fresh / raw claim + complete']!),
            spread(r.ratios['engine fresh / raw claim + complete']!),
            spread(r.ratios['engine fresh / baseline engine fresh']!),
            spread(r.ratios['baseline engine replay / raw SELECT by key']!),
            spread(r.ratios['engine replay / raw SELECT by key']!),
            spread(r.ratios['engine replay / baseline engine replay']!),
          ]),
        )}`;
  const decoded = results
    .filter((r) => r.ratios['live read, mapped by drizzle / live read, by position'])
    .map(
      (r) =>
        `\n\n${storeName(r.store)}'s hot read (the replay's statement), its row mapped by drizzle (\`get()\`) vs by position (\`values()\`, drizzle-seams.ts): ${micros(r.microsPerOp['live read, mapped by drizzle'])} vs ${micros(r.microsPerOp['live read, by position'])} µs, ${spread(r.ratios['live read, mapped by drizzle / live read, by position']!)}.`,
    )
    .join('');
  return `### 1. Floor vs engine, per operation (one connection, sequential)\n\nFresh path:\n\n${fresh}\n\nReplay path:\n\n${replay}${beside}${decoded}\n\nMedians of per-batch µs/op; ratios are medians of per-round ratios (p25–p75 across rounds). ${shape}.`;
}

export function renderHttp(result: HttpResult): string {
  const sections = [1, 64].map((connections) => {
    const rows = result.rows
      .filter((row) => row.connections === connections)
      .map((row) => [
        row.variant,
        row.mode,
        thousands(row.requestsPerSecond),
        fixed(row.p50Ms, 2),
        fixed(row.p99Ms, 2),
        thousands(row.serverCpuMicros),
        row.cpu
          ? `${thousands(row.cpu.machineCpuMicros)} (${thousands(row.cpu.databaseCpuMicros)}, ${thousands(row.cpu.loadCpuMicros)})`
          : '',
        `**${ratio(row.ratioToBare)}**`,
        row.ratioToRouteBare === undefined ? '' : ratio(row.ratioToRouteBare),
        row.non2xx + row.errors === 0 ? '0' : `${row.non2xx} non-2xx, ${row.errors} errors`,
      ]);
    return `${connections} connection${connections === 1 ? '' : 's'}:\n\n${table(['variant', 'keys', 'req/s', 'p50 ms', 'p99 ms', 'server CPU µs/request', 'machine CPU µs/request (database, load generator)', 'req/s × bare', '× same route bare', 'failures'], rows)}`;
  });
  const checks = Object.entries(result.checks)
    .map(([variant, check]) => `${variant}: ${check}`)
    .join('; ');
  return `### 2. End to end over HTTP (autocannon, loopback)\n\n${sections.join('\n\n')}\n\n${result.rounds} round(s) × ${result.durationSeconds} s per run after a ${result.warmupSeconds} s warm-up; medians over rounds, ratios against the bare handler of the same round; server CPU: the variant's process's user + system CPU time over the run, per answered request (a figure the machine's load disturbs less than req/s); machine CPU: every core's busy time over the run per answered request, with the database processes' (PostgreSQL, Redis) and the load generator's (autocannon, in the bench's process) shares in brackets; the rest is the server and the kernel's loopback networking (bench/machine-cpu.ts). With every core busy, req/s is at most the cores' µs per second over the machine CPU per request. Fresh: a new key per request; replay: one key, stored before the run. Same key twice, per variant: ${checks}.`;
}

export function renderScale(result: ScaleResult): string {
  const claims = table(
    [
      'store',
      'rows in the big table',
      'bulk fill, s',
      'claim, empty table, µs',
      'claim, big table, µs',
      '**big / empty** (p25–p75)',
      'target',
      'raw INSERT alone: empty → big, µs',
      'raw big / empty (p25–p75)',
    ],
    result.claims.map((c) => [
      storeName(c.store),
      thousands(c.rowsInBigTable),
      fixed(c.fillSeconds, 1),
      micros(c.microsPerClaim.empty),
      micros(c.microsPerClaim.big),
      spread(c.ratio),
      verdict(c.target),
      `${micros(c.raw.microsPerInsert.empty)} → ${micros(c.raw.microsPerInsert.big)}`,
      spread(c.raw.ratio).replace(/\*\*/g, ''),
    ]),
  );
  const sweeps = table(
    [
      'store',
      'expired rows swept',
      'sweep, rows/s (median batch)',
      'sweep, rows/s (all batches)',
      'naive row-by-row, rows/s',
      '**sweep / naive**',
    ],
    result.sweeps.map((s) => [
      storeName(s.store),
      thousands(s.sweepOverall.rows),
      thousands(s.rowsPerSecond.sweep),
      thousands(s.sweepOverall.rowsPerSecond),
      thousands(s.rowsPerSecond.naive),
      `**${fixed(s.speedup, 1)}×**`,
    ]),
  );
  const shape = result.sweeps
    .map(
      (s) =>
        `${storeName(s.store)}: ${s.rounds} rounds of one ${s.batchSize}-row sweep batch and ${s.naiveRowsPerRound} naive rows`,
    )
    .join('; ');
  return `### 3. Scale\n\nClaim latency (\`store.claim\`, fresh key) with half archived, half expired rows vs an empty table:\n\n${claims}\n\nSweep (\`store.sweep({ batchSize: 1000 })\`) vs a naive loop (SELECT one expired row, UPDATE it; raw prepared statements):\n\n${sweeps}\n\n${shape}.`;
}

export function renderMemory(results: readonly MemoryResult[]): string {
  const rows = results.map((m) => {
    const first = m.samples[0]!;
    const last = m.samples[m.samples.length - 1]!;
    return [
      storeName(m.store),
      `${thousands(m.warmup)} + ${thousands(m.ops)}`,
      `${fixed(first.rssMiB, 1)} → ${fixed(last.rssMiB, 1)}`,
      `**${fixed(m.rssGrowth * 100, 1)}%**`,
      `${fixed(m.rssGrowthSecondHalf * 100, 1)}%`,
      fixed(m.rssSlopeMiBPer10k, 2),
      `${fixed(first.heapUsedMiB, 1)} → ${fixed(last.heapUsedMiB, 1)}`,
      fixed(m.heapSlopeMiBPer10k, 3),
      verdict(m.target),
    ];
  });
  const samples = results
    .map((m) => {
      const every = `every ${thousands(m.samples[1]!.ops)} ops`;
      return [
        `${storeName(m.store)} RSS MiB ${every}:        ${m.samples.map((s) => fixed(s.rssMiB, 1)).join(', ')}`,
        `${storeName(m.store)} V8 heap total MiB ${every}: ${m.samples.map((s) => fixed(s.heapTotalMiB, 1)).join(', ')}`,
      ].join('\n');
    })
    .join('\n');
  return `### 4. Memory (fresh \`engine.execute\` calls, Drizzle store, GC before each sample)\n\n${table(['store', 'warm-up + measured ops', 'RSS MiB, first → last', 'RSS growth', 'growth, 2nd half', 'RSS slope MiB / 10k ops', 'heap used MiB', 'heap slope MiB / 10k ops', 'target (growth)'], rows)}\n\n\`\`\`\n${samples}\n\`\`\``;
}
