/**
 * Part 1, floor vs engine, per operation, one connection, sequential:
 * (a) the raw driver running the store's own claim and completion SQL as two prepared
 *     statements (better-sqlite3 `prepare`, pg named queries, postgres-js `unsafe(…, { prepare:
 *     true })`, libsql `execute`; on MySQL, which has no
 *     RETURNING, the claim is its INSERT and the read of the row back, through mysql2's `query`
 *     as drizzle sends them);
 * (b) idem's engine on the fresh path, `createEngine({ store: createDrizzleStore(db) })`;
 * (c) idem's replay of a completed key vs one raw `SELECT` by primary key.
 * The Drizzle store alone (`store.claim` + `store.complete`) is measured too, to tell the
 * store's cost from the engine's. The floor's SQL is captured from the store itself, so both
 * sides run the very same statements on the same tables and indexes.
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { createEngine, defaultFingerprint, type IdempotencyStore } from '@idem/core';
import { createDrizzleStore, defineSqliteTables } from '@idem/drizzle';
import { sqliteClock } from '../packages/drizzle/src/database-clock.ts';
import { liveRowOfValues, nowOfValues } from '../packages/drizzle/src/drizzle-seams.ts';
import { and, eq, getTableColumns, sql as drizzleSql } from 'drizzle-orm';
import { drizzle as drizzleSqlite } from 'drizzle-orm/better-sqlite3';
import { drizzle as drizzleLibsql } from 'drizzle-orm/libsql';
import { drizzle as drizzleMysql } from 'drizzle-orm/mysql2';
import { drizzle as drizzlePostgres } from 'drizzle-orm/node-postgres';
import { drizzle as drizzlePostgresJs } from 'drizzle-orm/postgres-js';
import {
  openBenchLibsql,
  openBenchMysql,
  openBenchPostgres,
  openBenchPostgresJs,
  openBenchSqlite,
  type BenchDatabase,
  type BenchLibsql,
  type BenchMysql,
  type BenchPostgresJs,
} from './databases.ts';
import { interleave, median, medianRatio, ratioSpread, timeBatch, type Variant } from './measure.ts';

const SCOPE = 'acct_42/payments.create';
const FINGERPRINT = defaultFingerprint({ amount: 1200, currency: 'EUR' });
const VALUE = { id: 'pay_4f1c2d', amount: 1200, currency: 'EUR', createdAt: '2026-01-01T00:00:00.000Z' };
const BODY = JSON.stringify(VALUE);
const LEASE_MS = 30_000;
const RETENTION_MS = 86_400_000;
/** Completed keys the replay variants cycle through. */
const REPLAY_KEYS = 1000;

/** A target the floor comparison asserts. */
export interface Target {
  ratio: number;
  /** The ratio may be at most this. */
  atMost: number;
  met: boolean;
}

/** The drivers the floor runs on: `sqlite` is better-sqlite3, `postgres` node-postgres, `mysql` mysql2. */
export type FloorStore = 'sqlite' | 'libsql' | 'postgres' | 'postgres-js' | 'mysql';
type FloorDatabase = BenchDatabase | BenchMysql | BenchLibsql | BenchPostgresJs;

const OPEN: Record<FloorStore, () => Promise<FloorDatabase>> = {
  sqlite: () => openBenchSqlite(),
  libsql: () => openBenchLibsql(),
  postgres: () => openBenchPostgres({ max: 1 }),
  'postgres-js': () => openBenchPostgresJs({ max: 1 }),
  mysql: () => openBenchMysql({ max: 1 }),
};

export interface FloorResult {
  store: FloorStore;
  opsPerBatch: number;
  rounds: number;
  /** Median µs per operation, per variant. */
  microsPerOp: Record<string, number>;
  /** Median of per-round ratios, with their 25th/75th percentiles. */
  ratios: Record<string, { median: number; p25: number; p75: number }>;
  /** Whether a baseline build was timed beside this one (`baseline …` variants and ratios). */
  baseline: boolean;
  targets: { engineFreshVsFloor: Target; replayVsOneStatement: Target };
  /** The store's SQL the floor runs (as captured from the store). */
  sql: { claim: string; complete: string; read: string; readBack?: string };
}

export interface FloorOptions {
  quick: boolean;
  stores: ReadonlyArray<FloorStore>;
  /**
   * A directory holding another build as `node_modules/@idem/core` and `node_modules/@idem/drizzle`
   * (each its package.json and dist/, drizzle-orm linked beside them): its engine and store are
   * timed in the same rounds, against the same floor.
   */
  baseline?: string | undefined;
  /** Rounds per variant; more narrow the spread on a loaded machine. Defaults to 41 (5 with `quick`). */
  rounds?: number | undefined;
}

/** The engine and store of another build. */
interface Build {
  createEngine: typeof createEngine;
  createDrizzleStore: typeof createDrizzleStore;
}

async function loadBuild(directory: string): Promise<Build> {
  const entry = (name: string) =>
    pathToFileURL(join(directory, 'node_modules', '@idem', name, 'dist', 'index.js')).href;
  const [core, drizzle] = await Promise.all([import(entry('core')), import(entry('drizzle'))]);
  return { createEngine: core.createEngine, createDrizzleStore: drizzle.createDrizzleStore } as Build;
}

export async function runFloor({ quick, stores, baseline, rounds }: FloorOptions): Promise<FloorResult[]> {
  const build = baseline === undefined ? undefined : await loadBuild(baseline);
  const results: FloorResult[] = [];
  for (const store of stores) {
    const database = await OPEN[store]();
    try {
      results.push(await compare(database, quick, build, rounds));
    } finally {
      await database.close();
    }
  }
  return results;
}

/** The raw statements of one dialect, each a function of plain values. */
interface RawStatements {
  claim(key: string, token: string): Promise<void> | void;
  complete(key: string, token: string): Promise<void> | void;
  selectByKey(key: string): Promise<void> | void;
  /** What the store runs on a replay, raw: SQLite its read (arrays, as the store takes it), PostgreSQL the claim-or-read statement. */
  replayStatements(key: string, token: string): Promise<void> | void;
}

interface Captured {
  sql: string;
  params: unknown[];
  /** The key and token the capture ran with: {@link bind} puts a run's own in their places. */
  key?: string;
  token?: string;
}

/**
 * The parameters the store bound to `statement` during the capture, with the capture's key and
 * token replaced by `key` and `token`: the floor binds exactly what the store binds, in its order,
 * whatever columns a later issue adds.
 */
function bind(statement: Captured, key: string, token = ''): Array<string | number> {
  return statement.params.map((value) =>
    value === statement.key ? key : value === statement.token ? token : (value as string | number),
  );
}

/** The store's statements the floor replays; `readBack` is MySQL's read of the row its INSERT wrote. */
interface CapturedSql {
  claim: Captured;
  complete: Captured;
  read: Captured;
  readBack?: Captured;
}

async function compare(
  database: FloorDatabase,
  quick: boolean,
  baseline: Build | undefined,
  roundsWanted: number | undefined,
): Promise<FloorResult> {
  const sql = await captureStoreSql(database);
  const raw =
    database.dialect === 'sqlite'
      ? sqliteStatements(database, sql)
      : database.dialect === 'libsql'
        ? libsqlStatements(database, sql)
        : database.dialect === 'mysql'
          ? mysqlStatements(database, sql)
          : database.dialect === 'postgres'
            ? postgresStatements(database, sql)
            : postgresJsStatements(database, sql);
  const store = createDrizzleStore(database.db);
  const engine = createEngine({ store });

  const replayKeys = Array.from({ length: REPLAY_KEYS }, () => randomUUID());
  for (const key of replayKeys) await engine.execute({ scope: SCOPE, key, fingerprint: FINGERPRINT }, () => VALUE);

  const sync = database.dialect === 'sqlite';
  // Short batches and many rounds: on a shared machine, what disturbs one variant's batch should
  // disturb its neighbours' too, and the median over rounds drops the rounds it did not.
  // libsql commits with synchronous = FULL (an fsync each, milliseconds): batches as on a server.
  const opsPerBatch = sync ? (quick ? 200 : 1000) : quick ? 30 : 50;
  const rounds = roundsWanted ?? (quick ? 5 : 41);
  let cursor = 0;
  const nextReplayKey = () => replayKeys[cursor++ % REPLAY_KEYS]!;

  // better-sqlite3 is synchronous: its floor is timed without an `await` per call, which the
  // raw driver would never need; the engine's API is asynchronous, so it pays for its awaits.
  const rawBatch = (op: (i: number) => unknown): (() => Promise<number> | number) =>
    sync ? () => timeSync(opsPerBatch, op) : () => timeBatch(opsPerBatch, op);

  const variants: Variant[] = [
    {
      name: 'raw claim + complete',
      batch: rawBatch(() => {
        const key = randomUUID();
        const token = randomUUID();
        const claimed = raw.claim(key, token);
        return claimed instanceof Promise ? claimed.then(() => raw.complete(key, token)) : raw.complete(key, token);
      }),
    },
    { name: 'store claim + complete', batch: () => timeBatch(opsPerBatch, () => storeFresh(store)) },
    {
      name: 'engine fresh',
      batch: () =>
        timeBatch(opsPerBatch, () =>
          engine.execute({ scope: SCOPE, key: randomUUID(), fingerprint: FINGERPRINT }, () => VALUE),
        ),
    },
    { name: 'raw SELECT by key', batch: rawBatch(() => raw.selectByKey(nextReplayKey())) },
    { name: 'raw replay statement', batch: rawBatch(() => raw.replayStatements(nextReplayKey(), randomUUID())) },
    { name: 'store replay (claim)', batch: () => timeBatch(opsPerBatch, () => storeReplay(store, nextReplayKey())) },
    {
      name: 'engine replay',
      batch: () =>
        timeBatch(opsPerBatch, async () => {
          const result = await engine.execute(
            { scope: SCOPE, key: nextReplayKey(), fingerprint: FINGERPRINT },
            () => VALUE,
          );
          if (!result.replayed) throw new Error('[bench] expected a replay');
        }),
    },
  ];

  // SQLite's hot read (the replay's one statement), its row decoded two ways: by position from
  // `values()` (the store's way, drizzle-seams.ts) and by drizzle's own mapping of `get()`.
  if (database.dialect === 'sqlite') {
    const { keys } = defineSqliteTables();
    const selection = { ...getTableColumns(keys), now: drizzleSql`${sqliteClock.now}`.mapWith(keys.createdAt) };
    const where = and(eq(keys.scope, drizzleSql.placeholder('scope')), eq(keys.key, drizzleSql.placeholder('key')));
    const read = database.db.select(selection).from(keys).where(where).prepare();
    variants.push(
      {
        name: 'live read, by position',
        batch: rawBatch(() => {
          const [values] = read.values({ scope: SCOPE, key: nextReplayKey() });
          if (!values || !liveRowOfValues(values) || !nowOfValues(values)) throw new Error('[bench] no row');
        }),
      },
      {
        name: 'live read, mapped by drizzle',
        batch: rawBatch(() => {
          const found = read.get({ scope: SCOPE, key: nextReplayKey() });
          if (!found) throw new Error('[bench] no row');
          const { now, ...row } = found;
          if (!row || !now) throw new Error('[bench] no row');
        }),
      },
    );
  }

  if (baseline) {
    const baselineStore = baseline.createDrizzleStore(database.db);
    const baselineEngine = baseline.createEngine({ store: baselineStore });
    variants.push(
      { name: 'baseline store claim + complete', batch: () => timeBatch(opsPerBatch, () => storeFresh(baselineStore)) },
      {
        name: 'baseline engine fresh',
        batch: () =>
          timeBatch(opsPerBatch, () =>
            baselineEngine.execute({ scope: SCOPE, key: randomUUID(), fingerprint: FINGERPRINT }, () => VALUE),
          ),
      },
      {
        name: 'baseline store replay (claim)',
        batch: () => timeBatch(opsPerBatch, () => storeReplay(baselineStore, nextReplayKey())),
      },
      {
        name: 'baseline engine replay',
        batch: () =>
          timeBatch(opsPerBatch, async () => {
            const result = await baselineEngine.execute(
              { scope: SCOPE, key: nextReplayKey(), fingerprint: FINGERPRINT },
              () => VALUE,
            );
            if (!result.replayed) throw new Error('[bench] expected a replay');
          }),
      },
    );
  }

  const times = await interleave(variants, { rounds, warmupRounds: quick ? 1 : 2 });
  const microsPerOp = Object.fromEntries(Object.entries(times).map(([name, values]) => [name, median(values) / 1000]));
  const ratio = (numerator: string, denominator: string) => {
    const [p25, p75] = ratioSpread(times, numerator, denominator);
    return { median: medianRatio(times, numerator, denominator), p25, p75 };
  };
  const ratios = {
    'store claim + complete / raw claim + complete': ratio('store claim + complete', 'raw claim + complete'),
    'engine fresh / raw claim + complete': ratio('engine fresh', 'raw claim + complete'),
    'engine fresh / store claim + complete': ratio('engine fresh', 'store claim + complete'),
    'raw replay statement / raw SELECT by key': ratio('raw replay statement', 'raw SELECT by key'),
    'store replay (claim) / raw SELECT by key': ratio('store replay (claim)', 'raw SELECT by key'),
    'engine replay / raw SELECT by key': ratio('engine replay', 'raw SELECT by key'),
    ...(database.dialect === 'sqlite' && {
      'live read, mapped by drizzle / live read, by position': ratio(
        'live read, mapped by drizzle',
        'live read, by position',
      ),
      'live read, mapped by drizzle / engine replay': ratio('live read, mapped by drizzle', 'engine replay'),
      'live read, by position / engine replay': ratio('live read, by position', 'engine replay'),
    }),
    ...(baseline && {
      'baseline engine fresh / raw claim + complete': ratio('baseline engine fresh', 'raw claim + complete'),
      'baseline engine replay / raw SELECT by key': ratio('baseline engine replay', 'raw SELECT by key'),
      'engine fresh / baseline engine fresh': ratio('engine fresh', 'baseline engine fresh'),
      'engine replay / baseline engine replay': ratio('engine replay', 'baseline engine replay'),
    }),
  };
  const target = (value: number, atMost: number): Target => ({ ratio: value, atMost, met: value <= atMost });
  return {
    store: database.dialect,
    opsPerBatch,
    rounds,
    microsPerOp,
    ratios,
    baseline: baseline !== undefined,
    targets: {
      engineFreshVsFloor: target(ratios['engine fresh / raw claim + complete'].median, 1.15),
      replayVsOneStatement: target(ratios['engine replay / raw SELECT by key'].median, 1.15),
    },
    sql: {
      claim: sql.claim.sql,
      complete: sql.complete.sql,
      read: sql.read.sql,
      ...(sql.readBack && { readBack: sql.readBack.sql }),
    },
  };
}

function timeSync(count: number, op: (i: number) => unknown): number {
  const start = process.hrtime.bigint();
  for (let i = 0; i < count; i++) op(i);
  return Number(process.hrtime.bigint() - start) / count;
}

async function storeFresh(store: IdempotencyStore): Promise<void> {
  const key = randomUUID();
  const claim = await store.claim({
    scope: SCOPE,
    key,
    fingerprint: FINGERPRINT,
    token: randomUUID(),
    leaseMs: LEASE_MS,
    retentionMs: RETENTION_MS,
    expiredReuse: 'execute',
  });
  if (claim.outcome !== 'claimed') throw new Error('[bench] expected a fresh claim');
  await store.complete({
    scope: SCOPE,
    key,
    token: claim.record.token,
    outcome: { kind: 'success', status: 200, body: BODY },
  });
}

async function storeReplay(store: IdempotencyStore, key: string): Promise<void> {
  const claim = await store.claim({
    scope: SCOPE,
    key,
    fingerprint: FINGERPRINT,
    token: randomUUID(),
    leaseMs: LEASE_MS,
    retentionMs: RETENTION_MS,
    expiredReuse: 'execute',
  });
  if (claim.outcome !== 'existing') throw new Error('[bench] expected an existing record');
}

/**
 * Runs one fresh claim, its completion and one replay through a store over a logging drizzle
 * instance on the same connection, and answers the SQL it sent. Checks the parameter order
 * the floor binds, so that a change to the store's statements fails loudly here.
 */
async function captureStoreSql(database: FloorDatabase): Promise<CapturedSql> {
  const captured: Captured[] = [];
  const logger = { logQuery: (sql: string, params: unknown[]) => void captured.push({ sql, params }) };
  if (database.dialect === 'mysql') return captureMysqlSql(drizzleMysql(database.pool, { logger }), captured);
  const db =
    database.dialect === 'sqlite'
      ? drizzleSqlite({ client: database.client, logger })
      : database.dialect === 'libsql'
        ? drizzleLibsql({ client: database.client, logger })
        : database.dialect === 'postgres'
          ? drizzlePostgres({ client: database.pool, logger })
          : drizzlePostgresJs({ client: database.client, logger });
  const store = createDrizzleStore(db);
  const key = `capture-${randomUUID()}`;
  const token = randomUUID();
  const request = {
    scope: SCOPE,
    key,
    fingerprint: FINGERPRINT,
    token,
    leaseMs: LEASE_MS,
    retentionMs: RETENTION_MS,
    expiredReuse: 'execute',
  } as const;
  await store.claim(request);
  await store.complete({ scope: SCOPE, key, token, outcome: { kind: 'success', status: 200, body: BODY } });
  const fresh = captured.splice(0);
  await store.claim({ ...request, token: randomUUID() });
  const replay = captured.splice(0);
  // PostgreSQL claims with one statement that also reads the existing row (a data-modifying CTE):
  // a fresh claim and a replay are that statement. SQLite reads first: a fresh claim is the read
  // (a miss), the insert and the completion; a replay is the read alone.
  const oneStatementReplay = database.dialect === 'postgres' || database.dialect === 'postgres-js';
  const claim = fresh.find((entry) =>
    /^(insert into "idem_keys"|with "claimed" as \(insert into "idem_keys")/i.test(entry.sql),
  );
  const complete = fresh.find((entry) => /^update "idem_keys" set "state" = /i.test(entry.sql));
  const [read] = replay;
  const expectedFresh = oneStatementReplay ? [claim, complete] : [read, claim, complete];
  if (
    !claim ||
    !complete ||
    !read ||
    replay.length !== 1 ||
    fresh.length !== expectedFresh.length ||
    fresh.some((entry, i) => entry.sql !== expectedFresh[i]?.sql)
  ) {
    throw new Error(
      `[bench] the store's statements changed; update bench/floor.ts:\n${[...fresh, ...replay].map((entry) => entry.sql).join('\n')}`,
    );
  }
  if (oneStatementReplay && read.sql !== claim.sql)
    throw new Error('[bench] expected the PostgreSQL replay to be the claim-or-read statement');
  expectBinds(claim, [key, token]);
  expectBinds(complete, [key, token, BODY]);
  expectBinds(read, [key]);
  for (const statement of [claim, complete, read]) Object.assign(statement, { key, token });
  return { claim, complete, read };
}

/**
 * MySQL reads first, as SQLite does (a replay is the read alone), and, with no RETURNING, reads
 * back the row its INSERT wrote: a fresh claim is the read (a miss), the INSERT, the read back and
 * the completion.
 */
async function captureMysqlSql(
  db: Parameters<typeof createDrizzleStore>[0],
  captured: Captured[],
): Promise<CapturedSql> {
  const store = createDrizzleStore(db);
  const key = `capture-${randomUUID()}`;
  const token = randomUUID();
  const request = {
    scope: SCOPE,
    key,
    fingerprint: FINGERPRINT,
    token,
    leaseMs: LEASE_MS,
    retentionMs: RETENTION_MS,
    expiredReuse: 'execute',
  } as const;
  await store.claim(request);
  await store.complete({ scope: SCOPE, key, token, outcome: { kind: 'success', status: 200, body: BODY } });
  const fresh = captured.splice(0);
  await store.claim({ ...request, token: randomUUID() });
  const replay = captured.splice(0);
  const [read, claim, readBack, complete] = fresh;
  if (
    fresh.length !== 4 ||
    replay.length !== 1 ||
    !read ||
    !claim ||
    !readBack ||
    !complete ||
    replay[0]!.sql !== read.sql ||
    !/^insert into `idem_keys`/i.test(claim.sql) ||
    !/^select /i.test(readBack.sql) ||
    !/^update `idem_keys` set `state` = /i.test(complete.sql)
  ) {
    throw new Error(
      `[bench] the store's MySQL statements changed; update bench/floor.ts:\n${[...fresh, ...replay].map((entry) => entry.sql).join('\n')}`,
    );
  }
  expectBinds(read, [key]);
  expectBinds(claim, [key, token]);
  expectBinds(readBack, [key, token]);
  expectBinds(complete, [key, token, BODY]);
  for (const statement of [read, claim, readBack, complete]) Object.assign(statement, { key, token });
  return { claim, complete, read, readBack };
}

/** Fails loudly when the store no longer binds `values` to `statement` (the floor could not rebind it). */
function expectBinds(statement: Captured, values: unknown[]): void {
  const missing = values.filter((value) => !statement.params.includes(value));
  if (missing.length > 0)
    throw new Error(
      `[bench] the store binds ${JSON.stringify(statement.params)} to\n${statement.sql}\nwithout ${JSON.stringify(missing)}: update bench/floor.ts`,
    );
}

function sqliteStatements(
  database: Extract<BenchDatabase, { dialect: 'sqlite' }>,
  sql: { claim: Captured; complete: Captured; read: Captured },
): RawStatements {
  const claim = database.client.prepare(sql.claim.sql);
  const complete = database.client.prepare(sql.complete.sql);
  const read = database.client.prepare(sql.read.sql).raw();
  const select = database.client.prepare('SELECT * FROM "idem_keys" WHERE "scope" = ? AND "key" = ?');
  return {
    claim(key, token) {
      if (!claim.get(...bind(sql.claim, key, token))) throw new Error('[bench] raw claim lost');
    },
    complete(key, token) {
      // Stepped to SQLITE_DONE (`all`), as the store does: `get` resets a write … RETURNING
      // before DONE, which skips SQLite's WAL auto-checkpoint, so the WAL would grow without
      // bound (195 MB after 20,000 inserts here) and the floor would not be one a server runs on.
      if (complete.all(...bind(sql.complete, key, token)).length !== 1) throw new Error('[bench] raw complete lost');
    },
    selectByKey(key) {
      if (!select.get(SCOPE, key)) throw new Error('[bench] raw select found nothing');
    },
    replayStatements(key) {
      if (!read.get(...bind(sql.read, key))) throw new Error('[bench] raw read found nothing');
    },
  };
}

function libsqlStatements(database: BenchLibsql, sql: CapturedSql): RawStatements {
  const { client } = database;
  const run = (text: string, args: Array<string | number>) => client.execute({ sql: text, args });
  return {
    async claim(key, token) {
      if ((await run(sql.claim.sql, bind(sql.claim, key, token))).rows.length !== 1)
        throw new Error('[bench] raw claim lost');
    },
    async complete(key, token) {
      if ((await run(sql.complete.sql, bind(sql.complete, key, token))).rows.length !== 1)
        throw new Error('[bench] raw complete lost');
    },
    async selectByKey(key) {
      if ((await run('SELECT * FROM "idem_keys" WHERE "scope" = ? AND "key" = ?', [SCOPE, key])).rows.length !== 1)
        throw new Error('[bench] raw select found nothing');
    },
    async replayStatements(key) {
      if ((await run(sql.read.sql, bind(sql.read, key))).rows.length !== 1)
        throw new Error('[bench] raw read found nothing');
    },
  };
}

function postgresJsStatements(database: BenchPostgresJs, sql: CapturedSql): RawStatements {
  const { client } = database;
  const run = (text: string, values: Array<string | number>) => client.unsafe(text, values, { prepare: true });
  const claim = (key: string, token: string) => run(sql.claim.sql, bind(sql.claim, key, token));
  return {
    async claim(key, token) {
      const rows = await claim(key, token);
      if (rows.length !== 1 || rows[0]?.inserted !== true) throw new Error('[bench] raw claim lost');
    },
    async complete(key, token) {
      if ((await run(sql.complete.sql, bind(sql.complete, key, token))).length !== 1)
        throw new Error('[bench] raw complete lost');
    },
    async selectByKey(key) {
      if ((await run('SELECT * FROM "idem_keys" WHERE "scope" = $1 AND "key" = $2', [SCOPE, key])).length !== 1)
        throw new Error('[bench] raw select found nothing');
    },
    async replayStatements(key, token) {
      const rows = await claim(key, token);
      if (rows.length !== 1 || rows[0]?.inserted !== false) throw new Error('[bench] expected the existing row');
    },
  };
}

function postgresStatements(
  database: Extract<BenchDatabase, { dialect: 'postgres' }>,
  sql: { claim: Captured; complete: Captured; read: Captured },
): RawStatements {
  const { pool } = database;
  const named = (name: string, text: string) => (values: unknown[]) =>
    pool.query({ name: `bench:${name}`, text, values });
  const claimStatement = named('claim', sql.claim.sql);
  const complete = named('complete', sql.complete.sql);
  const claim = (key: string, token: string) => claimStatement(bind(sql.claim, key, token));
  const select = named('select', 'SELECT * FROM "idem_keys" WHERE "scope" = $1 AND "key" = $2');
  return {
    async claim(key, token) {
      const result = await claim(key, token);
      if (result.rowCount !== 1 || result.rows[0]?.inserted !== true) throw new Error('[bench] raw claim lost');
    },
    async complete(key, token) {
      if ((await complete(bind(sql.complete, key, token))).rowCount !== 1) throw new Error('[bench] raw complete lost');
    },
    async selectByKey(key) {
      if ((await select([SCOPE, key])).rowCount !== 1) throw new Error('[bench] raw select found nothing');
    },
    async replayStatements(key, token) {
      const claimed = await claim(key, token);
      if (claimed.rowCount !== 1 || claimed.rows[0]?.inserted !== false)
        throw new Error('[bench] expected the existing row');
    },
  };
}

/**
 * mysql2's `query` (text protocol, parameters escaped by the client), as drizzle's mysql2 driver
 * sends every statement; the replay's read as a user would write it, rows as objects.
 */
function mysqlStatements(database: BenchMysql, sql: CapturedSql): RawStatements {
  const { pool } = database;
  const readBack = sql.readBack!;
  const affected = (result: unknown) => (result as [{ affectedRows: number }])[0].affectedRows;
  const rows = (result: unknown) => (result as [unknown[]])[0];
  return {
    async claim(key, token) {
      const inserted = await pool.query(sql.claim.sql, bind(sql.claim, key, token));
      if (affected(inserted) !== 1 || rows(await pool.query(readBack.sql, bind(readBack, key, token))).length !== 1)
        throw new Error('[bench] raw claim lost');
    },
    async complete(key, token) {
      if (affected(await pool.query(sql.complete.sql, bind(sql.complete, key, token))) !== 1)
        throw new Error('[bench] raw complete lost');
    },
    async selectByKey(key) {
      if (
        rows(await pool.query('SELECT * FROM `idem_keys` WHERE `scope` = ? AND `key` = ?', [SCOPE, key])).length !== 1
      )
        throw new Error('[bench] raw select found nothing');
    },
    async replayStatements(key) {
      if (rows(await pool.query(sql.read.sql, bind(sql.read, key))).length !== 1)
        throw new Error('[bench] raw read found nothing');
    },
  };
}
