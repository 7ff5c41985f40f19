/**
 * Part `pgbench`: the database's own limits for the fresh path, beside idem's (bench/pgbench.sh:
 * the store's claim INSERT and completion UPDATE as one pair per simulated request, at 1 and 64
 * clients). Skipped, with a note, where pgbench is not installed.
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { POSTGRES_URL } from './databases.ts';

export interface PgbenchResult {
  /** The Markdown rows pgbench.sh printed, or why the part was skipped. */
  rows: string[];
  skipped?: string;
}

export function runPgbench({ quick }: { quick: boolean }): PgbenchResult {
  const installed = spawnSync('pgbench', ['--version'], { encoding: 'utf8' });
  if (installed.status !== 0) return { rows: [], skipped: 'pgbench is not installed' };
  const script = fileURLToPath(new URL('./pgbench.sh', import.meta.url));
  const run = spawnSync('bash', [script], {
    encoding: 'utf8',
    env: { ...process.env, DATABASE_URL: POSTGRES_URL, SECONDS_PER_RUN: quick ? '2' : '10' },
  });
  if (run.status !== 0) throw new Error(`[bench] pgbench.sh failed (${run.status}): ${run.stderr}`);
  return { rows: run.stdout.split('\n').filter((line) => line.startsWith('|')) };
}

export function renderPgbench(result: PgbenchResult): string {
  if (result.skipped) return `pgbench: skipped (${result.skipped}).`;
  return [
    "pgbench, the store's claim INSERT + completion UPDATE per simulated request (-M prepared), and the store's claim group + completion group statements for 16 and 64 requests each (the grouped ceiling; clients stand for the batcher's lanes):",
    '',
    '| what | clients | throughput | latency | machine CPU µs/request (PostgreSQL) |',
    '| --- | --- | --- | --- | --- |',
    ...result.rows,
  ].join('\n');
}
