/**
 * Connection losses on the pool drivers: every transaction the store opens (atomic mode, the
 * sweep lock, the reuse of an expired key, migrate) gives its connection back to the pool on
 * every path, a failing `BEGIN` included, so the store serves again as soon as the database does
 * (src/owned-transaction.ts). drizzle-orm 0.41–0.45's node-postgres `transaction()` runs `BEGIN`
 * before the `try … finally` that releases the client: a backend lost just before `BEGIN` leaked
 * the client for good, and a burst of losses left the pool empty while PostgreSQL was up.
 *
 * The backend is terminated exactly before a chosen statement: drizzle's logger sees each
 * statement just before it is sent, and there the test terminates every backend of the pool
 * (`pg_terminate_backend`, selected by `application_name`) from a synchronous child process, so
 * the client cannot read the server's notice before the statement goes out on the dead connection.
 */
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import mysql from 'mysql2/promise';
import { drizzle as drizzleNodePostgres } from 'drizzle-orm/node-postgres';
import { drizzle as drizzleMysql } from 'drizzle-orm/mysql2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ClaimRequest } from '@idem/core/store';
import { createDrizzleStore, migrate, type DrizzleStore } from '../src/index.ts';
import { mysqlSuitesRun, openMysqlTarget, type MysqlTarget } from './mysql-target.ts';
import {
  databaseUrl,
  isServerReachable,
  openPostgresTarget,
  postgresRequired,
  type PostgresTarget,
} from './pg-target.ts';
import { sleep } from './store-behaviour.ts';

const server = (await isServerReachable()) || postgresRequired();
const mysqlRuns = await mysqlSuitesRun();

/** Terminates every backend named `application`, waiting until each is gone, before returning. */
function terminateNow(application: string): number {
  const script = `import pg from 'pg';
const admin = new pg.Client({ connectionString: process.env.IDEM_ADMIN_URL, application_name: 'idem-terminator' });
await admin.connect();
const { rows } = await admin.query('SELECT count(pg_terminate_backend(pid, 5000)) AS n FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()', [process.env.IDEM_VICTIM]);
await admin.end();
process.stdout.write(String(rows[0].n));`;
  const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], {
    env: { ...process.env, IDEM_ADMIN_URL: databaseUrl(), IDEM_VICTIM: application },
  });
  return Number(out.toString());
}

const request = (key: string, retentionMs = 60_000): ClaimRequest => ({
  scope: 's',
  key,
  fingerprint: 'f',
  token: randomUUID(),
  leaseMs: 60_000,
  retentionMs,
  expiredReuse: 'execute',
});

/** Atomic mode's transaction: claims `key` and completes it, committed. */
const atomicClaim = (store: DrizzleStore, key: string) =>
  store.transaction!(async (t) => {
    const req = request(key);
    const claim = await t.insertClaim(req);
    if (claim.outcome !== 'claimed') throw new Error(`expected a claim, got ${claim.outcome}`);
    await t.complete({ ...req, outcome: { kind: 'success', status: 200, body: '{}' } });
    return { commit: true, value: claim.outcome };
  });

/** A key whose record has expired, so that its next claim reuses it (R2) in a transaction. */
async function expiredKey(store: DrizzleStore): Promise<string> {
  const key = `expired-${randomUUID()}`;
  const first = request(key, 1);
  await store.claim(first);
  await store.complete({ ...first, outcome: { kind: 'success', status: 200, body: '{}' } });
  await sleep(20);
  return key;
}

/** The transactions the store opens, each as the operation that opens it. */
const TRANSACTIONS = [
  { name: 'atomic mode', run: (store: DrizzleStore) => atomicClaim(store, `atomic-${randomUUID()}`) },
  { name: 'the sweep lock', run: (store: DrizzleStore) => store.sweepExclusive() },
  {
    name: 'the reuse of an expired key',
    prepare: expiredKey,
    run: (store: DrizzleStore, key?: string) => store.claim(request(key!)),
  },
] as const;

/**
 * The statements before which the connections are cut: the first statement matching the last
 * pattern, once each earlier one has matched in turn (so "inside" means after the BEGIN).
 */
const CUTS = [
  { name: 'BEGIN', patterns: [/^begin/i] },
  { name: 'the first statement inside', patterns: [/^begin/i, /^(select|insert|update|with)\b/i] },
  { name: 'COMMIT', patterns: [/^commit/i] },
] as const;

/** A drizzle logger that calls `cut` once, just before the statement `patterns` name (see {@link CUTS}). */
function cutter(cut: () => void) {
  let armed: RegExp[] = [];
  let cuts = 0;
  return {
    arm(patterns: readonly RegExp[]) {
      armed = [...patterns];
    },
    cuts: () => cuts,
    logger: {
      logQuery(query: string) {
        if (armed.length === 0 || !armed[0]!.test(query.trim())) return;
        armed.shift();
        if (armed.length > 0) return;
        cut();
        cuts++;
      },
    },
  };
}

describe('every transaction the store opens goes through openTransaction', () => {
  it('no source file but owned-transaction.ts calls .transaction( on anything but a transaction (a savepoint)', () => {
    const src = fileURLToPath(new URL('../src/', import.meta.url));
    const raw: string[] = [];
    for (const file of readdirSync(src).filter((name) => name.endsWith('.ts') && name !== 'owned-transaction.ts')) {
      const source = ts.createSourceFile(file, readFileSync(src + file, 'utf8'), ts.ScriptTarget.Latest, true);
      const visit = (node: ts.Node) => {
        if (
          ts.isCallExpression(node) &&
          ts.isPropertyAccessExpression(node.expression) &&
          node.expression.name.text === 'transaction' &&
          node.expression.expression.getText(source) !== 'tx'
        ) {
          const { line } = source.getLineAndCharacterOfPosition(node.getStart(source));
          raw.push(`${file}:${line + 1}: ${node.expression.getText(source)}(`);
        }
        ts.forEachChild(node, visit);
      };
      visit(source);
    }
    expect(raw).toEqual([]);
  });
});

describe.skipIf(!server)('node-postgres: a connection lost at any statement of a transaction', () => {
  const application = `idem-loss-${randomBytes(4).toString('hex')}`;
  let target: PostgresTarget;

  beforeAll(async () => {
    target = await openPostgresTarget({ max: 1, schemaPrefix: 'idem_loss' });
    await migrate(target.db);
  });
  afterAll(async () => {
    await target?.close();
  });

  /** A store over a fresh pool of two connections (a sweep round holds one for its lock while its batches run on the other). */
  async function fresh(use: (pool: pg.Pool, store: DrizzleStore, cut: ReturnType<typeof cutter>) => Promise<void>) {
    const pool = new pg.Pool({ connectionString: target.url, max: 2, application_name: application });
    // An idle client whose backend was terminated: pg-pool drops it and reports it here.
    pool.on('error', () => {});
    const cut = cutter(() => expect(terminateNow(application)).toBeGreaterThan(0));
    try {
      await use(pool, createDrizzleStore(drizzleNodePostgres({ client: pool, logger: cut.logger })), cut);
    } finally {
      await pool.end();
    }
  }

  for (const statement of CUTS) {
    for (const transaction of TRANSACTIONS) {
      it(`${transaction.name}: a backend lost just before ${statement.name} fails the transaction, its client leaves the pool, and the next one is served`, () =>
        fresh(async (pool, store, cut) => {
          const prepared = 'prepare' in transaction ? await transaction.prepare(store) : undefined;
          expect(pool.totalCount - pool.idleCount).toBe(0);
          cut.arm(statement.patterns);
          await expect(transaction.run(store, prepared)).rejects.toThrow();
          expect(cut.cuts()).toBe(1);
          // The dead client was given back (and destroyed): none is checked out, none is waited for.
          expect(pool.totalCount - pool.idleCount).toBe(0);
          expect(pool.waitingCount).toBe(0);
          // The pool serves the same transaction again, and gets its client back.
          const again = 'prepare' in transaction ? await transaction.prepare(store) : undefined;
          await expect(transaction.run(store, again)).resolves.toBeDefined();
          expect(pool.totalCount - pool.idleCount).toBe(0);
        }));
    }
  }

  it('migrate: a backend lost just before BEGIN fails the migration, and the next migration runs', () =>
    fresh(async (pool, _store, cut) => {
      const db = drizzleNodePostgres({ client: pool, logger: cut.logger });
      cut.arm([/^begin/i]);
      await expect(migrate(db)).rejects.toThrow();
      expect(cut.cuts()).toBe(1);
      expect(pool.totalCount - pool.idleCount).toBe(0);
      await expect(migrate(db)).resolves.toBeUndefined();
    }));
});

/** Terminates every backend named `application` now (an admin connection of its own). */
async function terminateAll(admin: pg.Client, application: string): Promise<number> {
  const { rows } = await admin.query<{ n: string }>(
    'SELECT count(pg_terminate_backend(pid)) AS n FROM pg_stat_activity WHERE application_name = $1',
    [application],
  );
  return Number(rows[0]!.n);
}

describe.skipIf(!server)('node-postgres: bursts of connection losses under load', () => {
  it('atomic transactions, sweeps and reuses of expired keys while every backend is terminated again and again: afterwards no client is checked out and the store serves', async () => {
    const application = `idem-burst-${randomBytes(4).toString('hex')}`;
    const target = await openPostgresTarget({ max: 1, schemaPrefix: 'idem_loss' });
    const pool = new pg.Pool({ connectionString: target.url, max: 4, application_name: application });
    pool.on('error', () => {});
    const admin = new pg.Client({ connectionString: databaseUrl(), application_name: 'idem-terminator' });
    await admin.connect();
    try {
      const db = drizzleNodePostgres({ client: pool });
      await migrate(db);
      const store = createDrizzleStore(db);
      let stop = false;
      const outcomes = { ok: 0, failed: 0 };
      const worker = async (run: () => Promise<unknown>) => {
        while (!stop) {
          await run().then(
            () => outcomes.ok++,
            () => outcomes.failed++,
          );
        }
      };
      const workers = [
        ...Array.from({ length: 6 }, () => worker(() => atomicClaim(store, `burst-${randomUUID()}`))),
        worker(() => store.sweepExclusive()),
        worker(async () => store.claim(request(await expiredKey(store)))),
      ];
      let terminations = 0;
      for (let round = 0; round < 80; round++) {
        terminations += await terminateAll(admin, application);
        await sleep(5 + (round % 7) * 5);
      }
      stop = true;
      await Promise.all(workers);
      expect(terminations).toBeGreaterThan(0);
      expect(outcomes.failed).toBeGreaterThan(0);
      // Every client went back: none checked out, none waited for, and the server holds no more than the pool.
      expect(pool.totalCount - pool.idleCount).toBe(0);
      expect(pool.waitingCount).toBe(0);
      const { rows } = await admin.query<{ n: string }>(
        'SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = $1',
        [application],
      );
      expect(Number(rows[0]!.n)).toBeLessThanOrEqual(pool.totalCount);
      // The store serves again: a fresh claim, an atomic transaction, a sweep.
      expect((await store.claim(request(`fresh-${randomUUID()}`))).outcome).toBe('claimed');
      await expect(atomicClaim(store, `fresh-${randomUUID()}`)).resolves.toBe('claimed');
      await expect(store.sweepExclusive()).resolves.toMatchObject({ skipped: false });
    } finally {
      await admin.end();
      await pool.end();
      await target.close();
    }
  });
});

/** Kills the MySQL connections `ids` (`KILL`), from a synchronous child process, before returning. */
function killNow(url: string, ids: Iterable<number>): void {
  const script = `import mysql from 'mysql2/promise';
const admin = await mysql.createConnection({ uri: process.env.IDEM_ADMIN_URL });
for (const id of JSON.parse(process.env.IDEM_VICTIMS)) await admin.query('KILL ' + Number(id)).catch(() => {});
await admin.end();`;
  execFileSync(process.execPath, ['--input-type=module', '-e', script], {
    env: { ...process.env, IDEM_ADMIN_URL: url, IDEM_VICTIMS: JSON.stringify([...ids]) },
  });
}

describe.skipIf(!mysqlRuns)('mysql2: a connection killed at any statement of a transaction', () => {
  let target: MysqlTarget;

  beforeAll(async () => {
    target = await openMysqlTarget();
    await migrate(target.db);
  });
  afterAll(async () => {
    await target?.close();
  });

  for (const statement of CUTS) {
    for (const transaction of TRANSACTIONS) {
      it(`${transaction.name}: a connection killed just before ${statement.name} fails the transaction, its connection leaves the pool, and the next one is served`, async () => {
        const pool = mysql.createPool({ uri: target.url, connectionLimit: 2 });
        const ids = new Set<number>();
        pool.on('connection', (connection) => void ids.add(connection.threadId));
        const internals = pool.pool as unknown as { _allConnections: unknown[]; _freeConnections: unknown[] };
        const held = () => internals._allConnections.length - internals._freeConnections.length;
        const cut = cutter(() => {
          killNow(target.url, ids);
          ids.clear();
        });
        try {
          const store = createDrizzleStore(drizzleMysql({ client: pool, logger: cut.logger }));
          const prepared = 'prepare' in transaction ? await transaction.prepare(store) : undefined;
          cut.arm(statement.patterns);
          await expect(transaction.run(store, prepared)).rejects.toThrow();
          expect(cut.cuts()).toBe(1);
          // No connection is held: every one the pool still counts is free.
          expect(held()).toBe(0);
          const again = 'prepare' in transaction ? await transaction.prepare(store) : undefined;
          await expect(transaction.run(store, again)).resolves.toBeDefined();
          expect(held()).toBe(0);
        } finally {
          await pool.end();
        }
      });
    }
  }
});
