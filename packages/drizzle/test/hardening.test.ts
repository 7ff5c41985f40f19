/**
 * Hardening (issue 14): defects an adversarial black-box pass found in @idem/drizzle, on SQLite
 * and PostgreSQL where both apply. Each test failed before its fix.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { sql } from 'drizzle-orm';
import { drizzle as drizzleNodePostgres } from 'drizzle-orm/node-postgres';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { createEngine, RequestInProgressError, StoreUnavailableError, type IdempotencyEvent } from '@idem/core';
import type { ClaimRequest } from '@idem/core/store';
import { runCli } from '../src/cli/index.ts';
import { createDrizzleStore, migrate, type DrizzleDatabase } from '../src/index.ts';
import { openDatabase, type OpenedDatabase } from '../src/connect.ts';
import { CREATE_PAYMENTS, countPgPayments, payOnPostgres } from './payments.ts';
import { isServerReachable, openPostgresTarget, postgresRequired, type PostgresTarget } from './pg-target.ts';
import { holdSqliteWriteLock, type HeldLock } from './sqlite-lock.ts';
import { claimed } from './store-behaviour.ts';
import { openSqliteTarget } from './sqlite-target.ts';

/** A database both this process and the CLI (given `--database url`) can open. */
interface SharedDatabase {
  db: DrizzleDatabase;
  url: string;
  close(): Promise<void>;
}

async function sqliteDatabase(): Promise<SharedDatabase> {
  const target = await openSqliteTarget();
  return { db: target.db, url: `file:${target.file}`, close: () => target.close() };
}

async function postgresDatabase(): Promise<SharedDatabase> {
  const target = await openPostgresTarget({ max: 4, schemaPrefix: 'idem_hardening' });
  if (!target.url) throw new Error('unreachable: the PostgreSQL half is skipped when only PGlite is available');
  return { db: target.db, url: target.url, close: () => target.close() };
}

// The CLI opens its own connection: PGlite (in-process) cannot be shared with it.
const postgresServer = (await isServerReachable()) || postgresRequired();

async function cli(argv: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const code = await runCli(argv, {
    stdout: (text) => void (stdout += text),
    stderr: (text) => void (stderr += text),
    env: {},
  });
  return { code, stdout, stderr };
}

describe.each([
  { database: 'SQLite', open: sqliteDatabase, skip: false },
  { database: 'PostgreSQL', open: postgresDatabase, skip: !postgresServer },
])('idem explain on $database (issue 14, item 13)', ({ open, skip }) => {
  let shared: SharedDatabase;
  beforeAll(async () => {
    if (skip) return;
    shared = await open();
    await migrate(shared.db);
  });
  afterAll(async () => {
    await shared?.close();
  });

  it.skipIf(skip)(
    'A1/K1: finds a key pasted in its header form ("…") as well as bare, with the same timeline',
    async () => {
      const store = createDrizzleStore(shared.db);
      const key = `order-${randomUUID()}`;
      const token = randomUUID();
      claimed(
        await store.claim({
          scope: 'public/payments.create',
          key,
          fingerprint: 'f',
          token,
          leaseMs: 30_000,
          retentionMs: 60_000,
          expiredReuse: 'execute',
        }),
      );
      await store.complete({
        scope: 'public/payments.create',
        key,
        token,
        outcome: { kind: 'success', status: 200, body: '{}' },
      });

      const bare = await cli(['explain', key, '--json', '--database', shared.url]);
      expect(bare.stderr).toBe('');
      expect(bare.code).toBe(0);
      const quoted = await cli(['explain', `"${key}"`, '--json', '--database', shared.url]);
      expect(quoted.stderr).toBe('');
      expect(quoted.code).toBe(0);
      expect(quoted.stdout).toBe(bare.stdout);
      expect(JSON.parse(quoted.stdout)).toMatchObject({
        key,
        scopes: [{ scope: 'public/payments.create', generations: [{ generation: 1, status: 200 }] }],
      });
    },
  );

  it.skipIf(skip)(
    'K3: a pasted value that is no key is refused as bad usage (exit 2), with one line saying why',
    async () => {
      const run = await cli(['explain', '"unterminated', '--database', shared.url]);
      expect(run.code).toBe(2);
      expect(run.stdout).toBe('');
      expect(run.stderr).toMatch(/^idem: "\\"unterminated" is not an Idempotency-Key: .*\n$/);
    },
  );
});

describe('SQLite while another process holds the write lock (issue 14, item 5)', () => {
  let directory: string;
  let opened: OpenedDatabase;
  let lock: HeldLock | undefined;
  const request = (overrides: Partial<ClaimRequest> = {}): ClaimRequest => ({
    scope: 'public/payments.create',
    key: randomUUID(),
    fingerprint: 'f',
    token: randomUUID(),
    leaseMs: 30_000,
    retentionMs: 60_000,
    expiredReuse: 'execute',
    ...overrides,
  });
  /** Records when `promise` settles, without changing it. */
  const tracked = <T>(promise: Promise<T>) => {
    const state = { settled: false, promise };
    promise.then(
      () => (state.settled = true),
      () => (state.settled = true),
    );
    return state;
  };

  beforeAll(async () => {
    directory = mkdtempSync(join(tmpdir(), 'idem-busy-'));
    // As an app opens it: `openDatabase`, the library's own defaults.
    opened = await openDatabase(`file:${join(directory, 'idem.db')}`);
    await migrate(opened.db);
  });
  afterEach(() => {
    lock?.kill();
    lock = undefined;
  });
  afterAll(async () => {
    await opened?.close();
    rmSync(directory, { recursive: true, force: true });
  });

  it('E1/E2: a claim waits for the lock without blocking the event loop: a replay and a ping are answered meanwhile, and the claim succeeds once the lock is released', async () => {
    const store = createDrizzleStore(opened.db, { busyRetryMs: 30_000 });
    const done = request();
    claimed(await store.claim(done));
    await store.complete({
      scope: done.scope,
      key: done.key,
      token: done.token,
      outcome: { kind: 'success', status: 200, body: '"paid"' },
    });

    lock = await holdSqliteWriteLock(join(directory, 'idem.db'));
    const waiting = tracked(store.claim(request()));
    const replay = await store.claim(request({ key: done.key }));
    expect(replay).toMatchObject({ outcome: 'existing', record: { outcome: { body: '"paid"' } } });
    await store.ping();
    expect(waiting.settled).toBe(false);

    await lock.release();
    expect(await waiting.promise).toMatchObject({ outcome: 'claimed', record: { state: 'processing', generation: 1 } });
  });

  it('E5: a claim that cannot get the lock within busyRetryMs is a 503 with Retry-After through the engine, the handler does not run, and the event loop kept turning meanwhile', async () => {
    const engine = createEngine({ store: createDrizzleStore(opened.db, { busyRetryMs: 200 }) });
    const handler = vi.fn(() => 'charged');
    lock = await holdSqliteWriteLock(join(directory, 'idem.db'));
    let turned = false;
    const answer = engine
      .execute({ scope: 'public/payments.create', key: randomUUID(), fingerprint: 'f' }, handler)
      .catch((error: unknown) => error);
    setImmediate(() => (turned = true));
    const error = await answer;
    expect(turned).toBe(true);
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect(error).toMatchObject({ status: 503, retryAfter: 2 });
    expect(handler).not.toHaveBeenCalled();
  });

  it('R3: migrate() on a fresh file waits for the lock without blocking, then migrates', async () => {
    const file = join(directory, 'fresh.db');
    const fresh = await openDatabase(`file:${file}`);
    try {
      lock = await holdSqliteWriteLock(file);
      const migrating = tracked(migrate(fresh.db));
      await new Promise((resolve) => setImmediate(resolve));
      await createDrizzleStore(opened.db).ping();
      expect(migrating.settled).toBe(false);
      await lock.release();
      await migrating.promise;
      claimed(await createDrizzleStore(fresh.db).claim(request()));
    } finally {
      await fresh.close();
    }
  });
});

// PGlite is one connection in this process: there is no pool to starve.
describe.skipIf(!postgresServer)(
  'atomic mode on a PostgreSQL server: duplicates while the first transaction runs (issue 14, item 7)',
  () => {
    let target: PostgresTarget;
    let pool: pg.Pool;

    beforeAll(async () => {
      target = await openPostgresTarget({ max: 2, schemaPrefix: 'idem_hardening_pool' });
      await migrate(target.db);
      await target.db.execute(sql.raw(CREATE_PAYMENTS));
      // A small pool, and a bounded wait for a connection: a starved pool shows up as a 503.
      pool = new pg.Pool({ connectionString: target.url!, max: 3, connectionTimeoutMillis: 3000 });
    });
    afterAll(async () => {
      await pool?.end();
      await target?.close();
    });

    it('E3: duplicates get 409 at once without waiting for the first transaction, and an unrelated key still executes while it runs', async () => {
      const db = drizzleNodePostgres(pool);
      const events: IdempotencyEvent[] = [];
      const engine = createEngine({ store: createDrizzleStore(db), onEvent: (event) => void events.push(event) });
      const scope = 'public/payments.create';
      const key = randomUUID();
      let started!: () => void;
      const running = new Promise<void>((resolve) => (started = resolve));
      let finish!: () => void;
      const gate = new Promise<void>((resolve) => (finish = resolve));
      const duplicateRuns = vi.fn();

      const first = engine.executeAtomic({ scope, key, fingerprint: 'f' }, async ({ tx }) => {
        started();
        await gate;
        await payOnPostgres(tx, `pay_${key}`);
        return 'paid';
      });
      try {
        await running;
        // More duplicates than the pool has connections left.
        const duplicates = Promise.allSettled(
          Array.from({ length: 6 }, () => engine.executeAtomic({ scope, key, fingerprint: 'f' }, duplicateRuns)),
        );
        const unrelated = await engine.executeAtomic({ scope, key: randomUUID(), fingerprint: 'f' }, async ({ tx }) => {
          await payOnPostgres(tx, `pay_unrelated_${key}`);
          return 'unrelated paid';
        });
        expect(unrelated).toMatchObject({ ok: true, value: 'unrelated paid', replayed: false });
        const answers = await duplicates;
        for (const answer of answers) {
          expect(answer.status).toBe('rejected');
          expect((answer as PromiseRejectedResult).reason).toBeInstanceOf(RequestInProgressError);
        }
        expect(duplicateRuns).not.toHaveBeenCalled();
        expect(events.filter((event) => event.type === 'conflict' && event.key === key)).toHaveLength(6);
      } finally {
        finish();
      }
      expect(await first).toMatchObject({ ok: true, value: 'paid', replayed: false });
      expect(await engine.executeAtomic({ scope, key, fingerprint: 'f' }, duplicateRuns)).toMatchObject({
        ok: true,
        value: 'paid',
        replayed: true,
      });
      expect(duplicateRuns).not.toHaveBeenCalled();
      expect(await countPgPayments(target.db)).toBe(2);
    });
  },
);
