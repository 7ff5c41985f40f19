/**
 * Part `status`, on both stores: the key-status lookup (`lookUpKeyStatus`: the store's
 * `timeline` and `get`) of keys with two generations (one archived into history, one live), with
 * 1,000,000 archived records of other keys in each of the live and history tables vs empty
 * tables, interleaved in rounds (target ≤ 1.2×), beside the same reads written by hand. The
 * lookup reads through the primary keys, so a reconciliation window's archive must not make it
 * slower than the database's own primary-key reads become.
 */
import { randomUUID } from 'node:crypto';
import { formatScope, type IdempotencyStore } from '@idem/core';
import { lookUpKeyStatus } from '@idem/core/key-status';
import { createDrizzleStore } from '@idem/drizzle';
import { openBenchPostgres, openBenchSqlite, type BenchDatabase } from './databases.ts';
import { interleave, median, medianRatio, nanosSince, ratioSpread } from './measure.ts';
import type { Target } from './floor.ts';
import { table } from './report.ts';

const KEYS = 200;
const OPERATION = 'payments.create';
const SCOPE = formatScope(OPERATION, 'alice');

export interface KeyStatusResult {
  store: 'sqlite' | 'postgres';
  /** Archived records of other keys, in each of the two tables. */
  archivedRows: number;
  fillSeconds: number;
  lookupsPerBatch: number;
  rounds: number;
  microsPerLookup: { empty: number; big: number };
  ratio: { median: number; p25: number; p75: number };
  /**
   * The same comparison for the raw driver running the lookup's three primary-key reads alone
   * (prepared statements, same keys, same rounds): how much of the ratio is the database's own.
   */
  raw: { microsPerLookup: { empty: number; big: number }; ratio: { median: number; p25: number; p75: number } };
  target: Target;
}

export async function runKeyStatus({
  quick,
  stores,
}: {
  quick: boolean;
  stores: ReadonlyArray<'sqlite' | 'postgres'>;
}): Promise<KeyStatusResult[]> {
  const results: KeyStatusResult[] = [];
  for (const store of stores) results.push(await lookupLatency(store, quick));
  return results;
}

async function lookupLatency(store: 'sqlite' | 'postgres', quick: boolean): Promise<KeyStatusResult> {
  const rows = quick ? 100_000 : 1_000_000;
  const open = () => (store === 'sqlite' ? openBenchSqlite() : openBenchPostgres({ max: 1 }));
  const empty = await open();
  const big = await open();
  try {
    const started = process.hrtime.bigint();
    await fillArchived(big, rows);
    const fillSeconds = nanosSince(started) / 1e9;
    const emptyStore = createDrizzleStore(empty.db);
    const bigStore = createDrizzleStore(big.db);
    const emptyKeys = await keysWithTwoGenerations(emptyStore);
    const bigKeys = await keysWithTwoGenerations(bigStore);
    const lookupsPerBatch = store === 'sqlite' ? 200 : 50;
    const rounds = quick ? 5 : 21;
    let next = 0;
    const batch = (target: IdempotencyStore, keys: readonly string[]) => async () => {
      const start = process.hrtime.bigint();
      for (let i = 0; i < lookupsPerBatch; i++) {
        const key = keys[next++ % keys.length]!;
        const status = await lookUpKeyStatus(target, {
          key,
          operation: OPERATION,
          scopes: [{ scope: SCOPE, operation: OPERATION }],
        });
        if (status?.generations.length !== 2) throw new Error('[bench] expected two generations');
      }
      return nanosSince(start) / lookupsPerBatch;
    };
    const rawBatch = (database: BenchDatabase, keys: readonly string[]) => {
      const read = rawReads(database);
      return async () => {
        const start = process.hrtime.bigint();
        for (let i = 0; i < lookupsPerBatch; i++) await read(keys[next++ % keys.length]!);
        return nanosSince(start) / lookupsPerBatch;
      };
    };
    const times = await interleave(
      [
        { name: 'empty', batch: batch(emptyStore, emptyKeys) },
        { name: 'big', batch: batch(bigStore, bigKeys) },
        { name: 'raw empty', batch: rawBatch(empty, emptyKeys) },
        { name: 'raw big', batch: rawBatch(big, bigKeys) },
      ],
      { rounds, warmupRounds: 2 },
    );
    const ratio = medianRatio(times, 'big', 'empty');
    const [p25, p75] = ratioSpread(times, 'big', 'empty');
    const [rawP25, rawP75] = ratioSpread(times, 'raw big', 'raw empty');
    return {
      store,
      archivedRows: rows,
      fillSeconds,
      lookupsPerBatch,
      rounds,
      microsPerLookup: { empty: median(times.empty!) / 1000, big: median(times.big!) / 1000 },
      ratio: { median: ratio, p25, p75 },
      raw: {
        microsPerLookup: { empty: median(times['raw empty']!) / 1000, big: median(times['raw big']!) / 1000 },
        ratio: { median: medianRatio(times, 'raw big', 'raw empty'), p25: rawP25, p75: rawP75 },
      },
      target: { ratio, atMost: 1.2, met: ratio <= 1.2 },
    };
  } finally {
    await empty.close();
    await big.close();
  }
}

/** `KEYS` keys of alice's, each used twice: generation 1 archived into history by the reuse, generation 2 live. */
async function keysWithTwoGenerations(store: IdempotencyStore): Promise<string[]> {
  const keys = Array.from({ length: KEYS }, () => randomUUID());
  const use = async (key: string, retentionMs: number) => {
    const claim = await store.claim({
      scope: SCOPE,
      key,
      fingerprint: null,
      token: randomUUID(),
      leaseMs: 1,
      retentionMs,
      expiredReuse: 'execute',
    });
    if (claim.outcome !== 'claimed') throw new Error('[bench] expected a claim');
    await store.complete({
      scope: SCOPE,
      key,
      token: claim.record.token,
      outcome: { kind: 'success', status: 200, body: '{"id":"pay_1","amount":1200,"currency":"EUR"}' },
    });
  };
  for (const key of keys) await use(key, 1);
  await new Promise((resolve) => setTimeout(resolve, 10));
  for (const key of keys) await use(key, 86_400_000);
  return keys;
}

/** The lookup's reads written by hand: the live row, the history rows, the live row again (prepared statements). */
function rawReads(database: BenchDatabase): (key: string) => Promise<void> | void {
  if (database.dialect === 'sqlite') {
    const live = database.client.prepare('SELECT * FROM idem_keys WHERE scope = ? AND key = ?');
    const history = database.client.prepare(
      'SELECT * FROM idem_key_history WHERE scope = ? AND key = ? ORDER BY generation',
    );
    return (key) => {
      live.get(SCOPE, key);
      if (history.all(SCOPE, key).length !== 1) throw new Error('[bench] expected one history row');
      live.get(SCOPE, key);
    };
  }
  const { pool } = database;
  const live = { name: 'bench:status-live', text: 'SELECT * FROM idem_keys WHERE scope = $1 AND key = $2' };
  const history = {
    name: 'bench:status-history',
    text: 'SELECT * FROM idem_key_history WHERE scope = $1 AND key = $2 ORDER BY generation',
  };
  return async (key) => {
    await pool.query({ ...live, values: [SCOPE, key] });
    if ((await pool.query({ ...history, values: [SCOPE, key] })).rowCount !== 1)
      throw new Error('[bench] expected one history row');
    await pool.query({ ...live, values: [SCOPE, key] });
  };
}

/** `rows` archived records of other keys in each table, in one statement per table, then statistics. */
async function fillArchived(database: BenchDatabase, rows: number): Promise<void> {
  const live =
    'scope, key, generation, fingerprint, state, token, created_at, lease_until, expires_at, completed_at, archived_at, takeovers, outcome_kind, outcome_status, body';
  if (database.dialect === 'postgres') {
    const values = `'acct_' || (i % 1000) || '/payments.create', md5(random()::text || i), 1, md5(i::text), 'archived', md5('t' || i),
      now() - interval '3 days', now() - interval '3 days', now() - interval '2 days', now() - interval '3 days', now() - interval '1 day', 0, 'success', 200, NULL`;
    await database.pool.query(`INSERT INTO idem_keys (${live}) SELECT ${values} FROM generate_series(1, ${rows}) AS i`);
    await database.pool.query(
      `INSERT INTO idem_key_history (${live}, reused_at) SELECT ${values}, now() - interval '1 day' FROM generate_series(1, ${rows}) AS i`,
    );
    await database.pool.query('VACUUM ANALYZE idem_keys');
    await database.pool.query('VACUUM ANALYZE idem_key_history');
    return;
  }
  const now = Date.now();
  const values = `'acct_' || (i % 1000) || '/payments.create', lower(hex(randomblob(16))), 1, NULL, 'archived', 't',
    @now - 259200000, @now - 259200000, @now - 172800000, @now - 259200000, @now - 86400000, 0, 'success', 200, NULL`;
  const series = `WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ${rows})`;
  database.client.prepare(`${series} INSERT INTO idem_keys (${live}) SELECT ${values} FROM s`).run({ now });
  database.client
    .prepare(`${series} INSERT INTO idem_key_history (${live}, reused_at) SELECT ${values}, @now - 86400000 FROM s`)
    .run({ now });
  database.client.exec('ANALYZE');
  database.client.pragma('wal_checkpoint(TRUNCATE)');
}

export function renderKeyStatus(results: readonly KeyStatusResult[]): string {
  const fixed = (value: number, digits: number) => value.toFixed(digits);
  return table(
    [
      'store',
      'archived rows of other keys (live + history)',
      'bulk fill, s',
      'lookup, empty tables, µs',
      'lookup, big tables, µs',
      '**big / empty** (p25–p75)',
      'target',
      'raw reads alone: empty → big, µs',
      'raw big / empty (p25–p75)',
    ],
    results.map((r) => [
      r.store === 'sqlite' ? 'SQLite (better-sqlite3)' : 'PostgreSQL (node-postgres)',
      `${Math.round(r.archivedRows).toLocaleString('en-US')} + ${Math.round(r.archivedRows).toLocaleString('en-US')}`,
      fixed(r.fillSeconds, 1),
      fixed(r.microsPerLookup.empty, 0),
      fixed(r.microsPerLookup.big, 0),
      `**${fixed(r.ratio.median, 2)}×** (${fixed(r.ratio.p25, 2)}–${fixed(r.ratio.p75, 2)})`,
      `${r.target.met ? 'met' : 'missed'} (≤ ${r.target.atMost})`,
      `${fixed(r.raw.microsPerLookup.empty, 0)} → ${fixed(r.raw.microsPerLookup.big, 0)}`,
      `${fixed(r.raw.ratio.median, 2)}× (${fixed(r.raw.ratio.p25, 2)}–${fixed(r.raw.ratio.p75, 2)})`,
    ]),
  );
}
