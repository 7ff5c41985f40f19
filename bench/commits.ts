/**
 * Part `commits` (issue 8): what a mutation costs PostgreSQL with and without atomic mode.
 * Through the engine, a handler that writes one row: `execute` (the row written on the pool,
 * outside idem's statements) and `executeAtomic` (the row written through the transaction),
 * each for a fresh key and for a replay. Per mutation: commits and rollbacks
 * (`pg_stat_database.xact_commit` / `xact_rollback` deltas on a database of its own, one pooled
 * connection, statistics flushed with `pg_stat_force_next_flush()`, as
 * packages/drizzle/test/atomic.test.ts does), statements sent (round trips, counted by Drizzle's
 * logger), and the median latency, the four variants interleaved in rounds.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { createEngine } from '@idem/core';
import { createDrizzleStore, migrate } from '@idem/drizzle';
import { POSTGRES_URL } from './databases.ts';
import { interleave, median, nanosSince } from './measure.ts';
import { table } from './report.ts';

export interface CommitsRow {
  mutation: 'fresh' | 'replay';
  mode: 'execute' | 'executeAtomic';
  commits: number;
  rollbacks: number;
  statements: number;
  /** Median latency per mutation, microseconds. */
  medianMicros: number;
}

export interface CommitsResult {
  runsPerCount: number;
  latencyRounds: number;
  latencyBatch: number;
  rows: CommitsRow[];
}

export async function runCommits({ quick }: { quick: boolean }): Promise<CommitsResult> {
  const name = `idem_bench_commits_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: POSTGRES_URL });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  const url = new URL(POSTGRES_URL);
  url.pathname = `/${name}`;
  // One connection: every statement runs on the backend whose statistics are flushed.
  const pool = new pg.Pool({ connectionString: url.toString(), max: 1 });
  let statements = 0;
  const db = drizzle(pool, { logger: { logQuery: () => void statements++ } });
  try {
    await migrate(db);
    await db.execute(sql.raw('CREATE TABLE bench_writes (id text PRIMARY KEY, amount integer NOT NULL)'));
    const engine = createEngine({ store: createDrizzleStore(db) });
    const write = (target: unknown, id: string) =>
      (target as typeof db)
        .execute(sql`INSERT INTO bench_writes (id, amount) VALUES (${id}, 10)`)
        .then(() => ({ charged: 10 }));
    const request = (key: string) => ({ scope: 'bench/commits', key, fingerprint: 'f' });
    const plainKey = randomUUID();
    const atomicKey = randomUUID();
    await engine.execute(request(plainKey), () => write(db, plainKey));
    await engine.executeAtomic(request(atomicKey), ({ tx }) => write(tx, atomicKey));
    const variants: Array<{ mutation: CommitsRow['mutation']; mode: CommitsRow['mode']; run: () => Promise<unknown> }> =
      [
        {
          mutation: 'fresh',
          mode: 'execute',
          run: () => {
            const key = randomUUID();
            return engine.execute(request(key), () => write(db, key));
          },
        },
        {
          mutation: 'fresh',
          mode: 'executeAtomic',
          run: () => {
            const key = randomUUID();
            return engine.executeAtomic(request(key), ({ tx }) => write(tx, key));
          },
        },
        {
          mutation: 'replay',
          mode: 'execute',
          run: () => engine.execute(request(plainKey), () => write(db, plainKey)),
        },
        {
          mutation: 'replay',
          mode: 'executeAtomic',
          run: () => engine.executeAtomic(request(atomicKey), ({ tx }) => write(tx, atomicKey)),
        },
      ];

    const counters = async () => {
      await pool.query('SELECT pg_stat_force_next_flush()');
      const { rows } = await admin.query<{ commits: string; rollbacks: string }>(
        'SELECT xact_commit AS commits, xact_rollback AS rollbacks FROM pg_stat_database WHERE datname = $1',
        [name],
      );
      return { commits: Number(rows[0]!.commits), rollbacks: Number(rows[0]!.rollbacks) };
    };
    const runsPerCount = quick ? 5 : 20;
    const counts = new Map<string, { commits: number; rollbacks: number; statements: number }>();
    for (const variant of variants) {
      // Best of three: a stray autovacuum or statistics write only ever adds.
      let best: { commits: number; rollbacks: number; statements: number } | undefined;
      for (let round = 0; round < 3; round++) {
        await variant.run(); // warm: prepared statements
        const before = await counters();
        statements = 0;
        for (let i = 0; i < runsPerCount; i++) await variant.run();
        const sent = statements;
        const after = await counters();
        // The flush call is one more committed transaction.
        const per = {
          commits: (after.commits - before.commits - 1) / runsPerCount,
          rollbacks: (after.rollbacks - before.rollbacks) / runsPerCount,
          statements: sent / runsPerCount,
        };
        if (!best || per.commits < best.commits) best = per;
      }
      counts.set(`${variant.mutation}/${variant.mode}`, best!);
    }

    const latencyRounds = quick ? 5 : 15;
    const latencyBatch = quick ? 20 : 100;
    const times = await interleave(
      variants.map((variant) => ({
        name: `${variant.mutation}/${variant.mode}`,
        batch: async () => {
          const perOp: number[] = [];
          for (let i = 0; i < latencyBatch; i++) {
            const start = process.hrtime.bigint();
            await variant.run();
            perOp.push(nanosSince(start));
          }
          return median(perOp);
        },
      })),
      { rounds: latencyRounds },
    );
    const rows = variants.map(({ mutation, mode }) => {
      const id = `${mutation}/${mode}`;
      return { mutation, mode, ...counts.get(id)!, medianMicros: median(times[id]!) / 1000 };
    });
    return { runsPerCount, latencyRounds, latencyBatch, rows };
  } finally {
    await pool.end();
    await admin.query(`DROP DATABASE IF EXISTS ${name}`);
    await admin.end();
  }
}

export function renderCommits(result: CommitsResult): string {
  const number = (value: number) => (Number.isInteger(value) ? String(value) : value.toFixed(2));
  return [
    `### Commits per mutation (PostgreSQL, a handler writing one row; counts over ${result.runsPerCount} mutations, best of 3; latency: median of ${result.latencyRounds} interleaved rounds × ${result.latencyBatch})`,
    '',
    table(
      ['mutation', 'engine call', 'commits', 'rollbacks', 'statements (round trips)', 'median latency (µs)'],
      result.rows.map((row) => [
        row.mutation === 'fresh' ? 'new key' : 'replay',
        `\`${row.mode}\``,
        number(row.commits),
        number(row.rollbacks),
        number(row.statements),
        row.medianMicros.toFixed(0),
      ]),
    ),
  ].join('\n');
}
