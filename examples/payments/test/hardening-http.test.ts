/**
 * Hardening (issue 14): defects an adversarial black-box pass found in the payments example,
 * black-box over real HTTP. Each test failed before its fix.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createDrizzleStore, openDatabase, type OpenedDatabase } from '@idem/drizzle';
import { holdSqliteWriteLock, type HeldLock } from '../../../packages/drizzle/test/sqlite-lock.ts';
import { get, ledger, migrateExample, mutate, newKey, startExample, type Reply, type RunningExample } from './http.ts';

const PAYMENT = { amount: 4200, currency: 'EUR' };

/** Records when `promise` settles, without changing it. */
function tracked<T>(promise: Promise<T>) {
  const state = { settled: false, promise };
  promise.then(
    () => (state.settled = true),
    () => (state.settled = true),
  );
  return state;
}

describe('the example on SQLite while another process holds the write lock (issue 14, item 5)', () => {
  let directory: string;
  let file: string;
  let opened: OpenedDatabase;
  let lock: HeldLock | undefined;
  const running: RunningExample[] = [];

  beforeAll(async () => {
    directory = mkdtempSync(join(tmpdir(), 'idem-example-busy-'));
    file = join(directory, 'payments.db');
    // As main.ts opens it.
    opened = await openDatabase(`file:${file}`);
    await migrateExample(opened.db);
  });
  afterEach(() => {
    lock?.kill();
    lock = undefined;
  });
  afterAll(async () => {
    for (const example of running) await example.close();
    await opened?.close();
    rmSync(directory, { recursive: true, force: true });
  });

  const start = async (busyRetryMs: number) => {
    const example = await startExample(opened.db, {}, { store: createDrizzleStore(opened.db, { busyRetryMs }) });
    running.push(example);
    return example;
  };

  it('E2/R4: /healthz, /idempotency and a replay are answered while a new payment waits for the lock, and the payment is charged once it is released', async () => {
    const { url } = await start(30_000);
    const paid = newKey();
    const first = await mutate(url, 'payments.create', PAYMENT, { 'idempotency-key': paid });
    expect(first.status).toBe(200);
    const before = await ledger(url);

    lock = await holdSqliteWriteLock(file);
    const waiting = tracked(mutate(url, 'payments.create', PAYMENT, { 'idempotency-key': newKey() }));
    const health = await get(url, '/healthz');
    const policy = await get(url, '/idempotency', { accept: 'application/json' });
    const replay = await mutate(url, 'payments.create', PAYMENT, { 'idempotency-key': paid });
    expect([health.status, policy.status, replay.status]).toEqual([200, 200, 200]);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.text).toBe(first.text);
    expect(waiting.settled).toBe(false);

    await lock.release();
    const payment: Reply = await waiting.promise;
    expect(payment.status).toBe(200);
    expect(payment.headers.get('idempotent-replayed')).toBeNull();
    expect(await ledger(url)).toHaveLength(before.length + 1);
  });

  it('E5: a payment that cannot get the lock in time is answered 503 with Retry-After without holding up /healthz, and nothing is charged; the next retry executes', async () => {
    const { url } = await start(200);
    const before = await ledger(url);
    const key = newKey();
    lock = await holdSqliteWriteLock(file);
    const refusing = tracked(mutate(url, 'payments.create', PAYMENT, { 'idempotency-key': key }));
    expect((await get(url, '/healthz')).status).toBe(200);
    expect(refusing.settled).toBe(false);
    const refused = await refusing.promise;
    expect(refused.status).toBe(503);
    expect(refused.headers.get('retry-after')).toBe('2');
    expect(refused.body.error.data.idempotency).toMatchObject({ code: 'idempotency_store_unavailable' });
    await lock.release();
    expect(await ledger(url)).toHaveLength(before.length);
    expect((await mutate(url, 'payments.create', PAYMENT, { 'idempotency-key': key })).status).toBe(200);
    expect(await ledger(url)).toHaveLength(before.length + 1);
  });
});
