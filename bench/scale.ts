/**
 * Part 3, scale, on both stores:
 * - claim latency (`store.claim` of a fresh key) with 1,000,000 archived and expired rows in
 *   the live table vs an empty table, interleaved in rounds (target ≤ 1.2×);
 * - the sweeper: `store.sweep({ batchSize: 1000 })` archiving 100,000 expired rows vs a naive
 *   row-by-row loop (SELECT one expired row, UPDATE it), in rows/s, interleaved in rounds.
 * Big tables are filled with one bulk SQL statement (generate_series on PostgreSQL, a
 * recursive CTE on SQLite), never row by row through the store.
 */
import { randomUUID } from 'node:crypto';
import { createDrizzleStore, type DrizzleStore } from '@idem/drizzle';
import { openBenchPostgres, openBenchSqlite, type BenchDatabase } from './databases.ts';
import { interleave, median, medianRatio, nanosSince, ratioSpread } from './measure.ts';
import type { Target } from './floor.ts';

const SCOPES = 1000;
const DAY_MS = 86_400_000;

export interface ScaleOptions {
  quick: boolean;
  stores: ReadonlyArray<'sqlite' | 'postgres'>;
}

export interface ClaimScaleResult {
  store: 'sqlite' | 'postgres';
  rowsInBigTable: number;
  /** Seconds the bulk fill took (insert + ANALYZE / checkpoint). */
  fillSeconds: number;
  claimsPerBatch: number;
  rounds: number;
  microsPerClaim: { empty: number; big: number };
  ratio: { median: number; p25: number; p75: number };
  /**
   * The same comparison for the raw driver running the store's insert alone (a prepared
   * statement, same rows, same rounds): how much of the ratio is the database's own.
   */
  raw: { microsPerInsert: { empty: number; big: number }; ratio: { median: number; p25: number; p75: number } };
  target: Target;
}

export interface SweepResult {
  store: 'sqlite' | 'postgres';
  expiredRows: number;
  batchSize: number;
  naiveRowsPerRound: number;
  rounds: number;
  /** Medians over rounds. */
  rowsPerSecond: { sweep: number; naive: number };
  /** All sweep batches together: rows archived / their total time. */
  sweepOverall: { rows: number; seconds: number; rowsPerSecond: number };
  /** Median over rounds of sweep rows/s over naive rows/s. */
  speedup: number;
}

export interface ScaleResult {
  claims: ClaimScaleResult[];
  sweeps: SweepResult[];
}

export async function runScale({ quick, stores }: ScaleOptions): Promise<ScaleResult> {
  const claims: ClaimScaleResult[] = [];
  const sweeps: SweepResult[] = [];
  for (const store of stores) {
    claims.push(await claimLatency(store, quick));
    sweeps.push(await sweepThroughput(store, quick));
  }
  return { claims, sweeps };
}

function open(store: 'sqlite' | 'postgres'): Promise<BenchDatabase> {
  return store === 'sqlite' ? openBenchSqlite() : openBenchPostgres({ max: 1 });
}

async function claimLatency(store: 'sqlite' | 'postgres', quick: boolean): Promise<ClaimScaleResult> {
  const rows = quick ? 200_000 : 1_000_000;
  const empty = await open(store);
  const big = await open(store);
  try {
    const started = process.hrtime.bigint();
    await fillExpired(big, rows, { archivedShare: 0.5 });
    const fillSeconds = nanosSince(started) / 1e9;
    const claimsPerBatch = store === 'sqlite' ? (quick ? 200 : 500) : quick ? 50 : 100;
    const rounds = quick ? 5 : 21;
    const claimBatch = (target: DrizzleStore) => async () => {
      const start = process.hrtime.bigint();
      for (let i = 0; i < claimsPerBatch; i++) {
        const claim = await target.claim({
          scope: `acct_${i % SCOPES}/payments.create`,
          key: randomUUID(),
          fingerprint: null,
          token: randomUUID(),
          leaseMs: 30_000,
          retentionMs: DAY_MS,
          expiredReuse: 'execute',
        });
        if (claim.outcome !== 'claimed') throw new Error('[bench] expected a fresh claim');
      }
      return nanosSince(start) / claimsPerBatch;
    };
    const rawBatch = (target: BenchDatabase) => {
      const insert = rawInsert(target);
      return async () => {
        const start = process.hrtime.bigint();
        for (let i = 0; i < claimsPerBatch; i++)
          await insert(`acct_${i % SCOPES}/payments.create`, randomUUID(), randomUUID());
        return nanosSince(start) / claimsPerBatch;
      };
    };
    const times = await interleave(
      [
        { name: 'empty', batch: claimBatch(createDrizzleStore(empty.db)) },
        { name: 'big', batch: claimBatch(createDrizzleStore(big.db)) },
        { name: 'raw empty', batch: rawBatch(empty) },
        { name: 'raw big', batch: rawBatch(big) },
      ],
      { rounds, warmupRounds: 2 },
    );
    const ratio = medianRatio(times, 'big', 'empty');
    const [p25, p75] = ratioSpread(times, 'big', 'empty');
    const [rawP25, rawP75] = ratioSpread(times, 'raw big', 'raw empty');
    return {
      store,
      rowsInBigTable: rows,
      fillSeconds,
      claimsPerBatch,
      rounds,
      microsPerClaim: { empty: median(times.empty!) / 1000, big: median(times.big!) / 1000 },
      ratio: { median: ratio, p25, p75 },
      raw: {
        microsPerInsert: { empty: median(times['raw empty']!) / 1000, big: median(times['raw big']!) / 1000 },
        ratio: { median: medianRatio(times, 'raw big', 'raw empty'), p25: rawP25, p75: rawP75 },
      },
      target: { ratio, atMost: 1.2, met: ratio <= 1.2 },
    };
  } finally {
    await empty.close();
    await big.close();
  }
}

async function sweepThroughput(store: 'sqlite' | 'postgres', quick: boolean): Promise<SweepResult> {
  const batchSize = 1000;
  const rounds = quick ? 20 : 100;
  const naiveRowsPerRound = store === 'sqlite' ? 200 : 50;
  const expiredRows = rounds * batchSize;
  const database = await open(store);
  try {
    await fillExpired(database, expiredRows + rounds * naiveRowsPerRound, { archivedShare: 0 });
    const target = createDrizzleStore(database.db);
    const naive = naiveArchiver(database);
    let sweptRows = 0;
    let sweepNanos = 0;
    const times = await interleave(
      [
        {
          name: 'sweep',
          batch: async () => {
            const start = process.hrtime.bigint();
            const { archived } = await target.sweep({ batchSize });
            const nanos = nanosSince(start);
            if (archived !== batchSize) throw new Error(`[bench] sweep archived ${archived}, expected ${batchSize}`);
            sweptRows += archived;
            sweepNanos += nanos;
            return nanos / archived;
          },
        },
        {
          name: 'naive',
          batch: async () => {
            const start = process.hrtime.bigint();
            for (let i = 0; i < naiveRowsPerRound; i++) {
              const pending = naive();
              if (pending) await pending;
            }
            return nanosSince(start) / naiveRowsPerRound;
          },
        },
      ],
      { rounds, warmupRounds: 0 },
    );
    const perSecond = (nanosPerRow: number) => 1e9 / nanosPerRow;
    return {
      store,
      expiredRows,
      batchSize,
      naiveRowsPerRound,
      rounds,
      rowsPerSecond: { sweep: perSecond(median(times.sweep!)), naive: perSecond(median(times.naive!)) },
      sweepOverall: { rows: sweptRows, seconds: sweepNanos / 1e9, rowsPerSecond: sweptRows / (sweepNanos / 1e9) },
      // Time per row naive over time per row swept = rows/s swept over rows/s naive.
      speedup: medianRatio(times, 'naive', 'sweep'),
    };
  } finally {
    await database.close();
  }
}

/**
 * Fills the live table with `rows` rows whose retention has passed, spread over 1000 scopes with
 * random keys: a share archived by an earlier sweep (no body), the rest completed but expired,
 * still holding their body. One statement, then statistics (and a WAL checkpoint on SQLite).
 */
async function fillExpired(
  database: BenchDatabase,
  rows: number,
  { archivedShare }: { archivedShare: number },
): Promise<void> {
  const archivedEvery = archivedShare <= 0 ? 0 : Math.round(1 / archivedShare);
  if (database.dialect === 'postgres') {
    const archived = archivedEvery === 0 ? 'false' : `i % ${archivedEvery} = 0`;
    await database.pool.query(`
      INSERT INTO idem_keys (scope, key, generation, fingerprint, state, token, created_at, lease_until, expires_at, completed_at, archived_at, takeovers, outcome_kind, outcome_status, body)
      SELECT 'acct_' || (i % ${SCOPES}) || '/payments.create', md5(random()::text || i), 1, md5(i::text),
             CASE WHEN ${archived} THEN 'archived' ELSE 'completed' END, md5('token' || i),
             now() - interval '3 days' - i * interval '1 millisecond',
             now() - interval '3 days' + interval '30 seconds',
             now() - interval '2 days' - i * interval '1 millisecond',
             now() - interval '3 days',
             CASE WHEN ${archived} THEN now() - interval '1 day' END,
             0, 'success', 200,
             CASE WHEN ${archived} THEN NULL ELSE '{"id":"pay_' || i || '","amount":1200,"currency":"EUR","createdAt":"2026-01-01T00:00:00.000Z"}' END
      FROM generate_series(1, ${rows}) AS i`);
    await database.pool.query('VACUUM ANALYZE idem_keys');
    return;
  }
  const archived = archivedEvery === 0 ? '0' : `i % ${archivedEvery} = 0`;
  const now = Date.now();
  database.client
    .prepare(
      `WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?)
       INSERT INTO idem_keys (scope, key, generation, fingerprint, state, token, created_at, lease_until, expires_at, completed_at, archived_at, takeovers, outcome_kind, outcome_status, body)
       SELECT 'acct_' || (i % ${SCOPES}) || '/payments.create', lower(hex(randomblob(16))), 1, lower(hex(randomblob(32))),
              CASE WHEN ${archived} THEN 'archived' ELSE 'completed' END, lower(hex(randomblob(16))),
              @now - 3 * ${DAY_MS} - i, @now - 3 * ${DAY_MS} + 30000, @now - 2 * ${DAY_MS} - i, @now - 3 * ${DAY_MS},
              CASE WHEN ${archived} THEN @now - ${DAY_MS} END,
              0, 'success', 200,
              CASE WHEN ${archived} THEN NULL ELSE '{"id":"pay_' || i || '","amount":1200,"currency":"EUR","createdAt":"2026-01-01T00:00:00.000Z"}' END
       FROM s`,
    )
    .run(rows, { now });
  database.client.exec('ANALYZE');
  database.client.pragma('wal_checkpoint(TRUNCATE)');
}

/** The store's claim insert written by hand as a raw prepared statement (same table and columns, `ON CONFLICT … DO NOTHING RETURNING *`), per key. */
function rawInsert(database: BenchDatabase): (scope: string, key: string, token: string) => Promise<void> | void {
  const columns = 'scope, key, generation, fingerprint, state, token, created_at, lease_until, expires_at, takeovers';
  if (database.dialect === 'sqlite') {
    const insert = database.client.prepare(
      `INSERT INTO idem_keys (${columns}) VALUES (?, ?, 1, NULL, 'processing', ?, @now, @now + 30000, @now + ${DAY_MS}, 0) ON CONFLICT (scope, key) DO NOTHING RETURNING *`,
    );
    return (scope, key, token) => {
      if (insert.all(scope, key, token, { now: Date.now() }).length !== 1) throw new Error('[bench] raw insert lost');
    };
  }
  const { pool } = database;
  return async (scope, key, token) => {
    const result = await pool.query({
      name: 'bench:raw-insert',
      text: `INSERT INTO idem_keys (${columns}) VALUES ($1, $2, 1, NULL, 'processing', $3, now(), now() + interval '30 seconds', now() + interval '1 day', 0) ON CONFLICT (scope, key) DO NOTHING RETURNING *`,
      values: [scope, key, token],
    });
    if (result.rowCount !== 1) throw new Error('[bench] raw insert lost');
  };
}

/** What a hand-written sweeper does: find one expired row, archive it, repeat (raw prepared statements, one transaction each). */
function naiveArchiver(database: BenchDatabase): () => Promise<void> | void {
  if (database.dialect === 'sqlite') {
    const next = database.client.prepare(
      `SELECT scope, key FROM idem_keys WHERE state <> 'archived' AND expires_at <= ? ORDER BY expires_at LIMIT 1`,
    );
    const archive = database.client.prepare(
      `UPDATE idem_keys SET state = 'archived', archived_at = ?, body = NULL WHERE scope = ? AND key = ?`,
    );
    return () => {
      const now = Date.now();
      const row = next.get(now) as { scope: string; key: string } | undefined;
      if (!row) throw new Error('[bench] naive sweeper ran out of expired rows');
      archive.run(now, row.scope, row.key);
    };
  }
  const { pool } = database;
  return async () => {
    const found = await pool.query<{ scope: string; key: string }>({
      name: 'bench:naive-next',
      text: `SELECT scope, key FROM idem_keys WHERE state <> 'archived' AND expires_at <= now() ORDER BY expires_at LIMIT 1`,
    });
    const row = found.rows[0];
    if (!row) throw new Error('[bench] naive sweeper ran out of expired rows');
    await pool.query({
      name: 'bench:naive-archive',
      text: `UPDATE idem_keys SET state = 'archived', archived_at = now(), body = NULL WHERE scope = $1 AND key = $2`,
      values: [row.scope, row.key],
    });
  };
}
