/**
 * Atomic mode's named lock on MySQL (the shared atomic suite in atomic.test.ts runs on MySQL
 * too): a duplicate is answered 409 at once while the first transaction runs its handler,
 * instead of waiting on the uncommitted row, and the lock — held by a pool connection, not by
 * the transaction — does not outlive the transaction on that connection.
 */
import { randomUUID } from 'node:crypto';
import mysql from 'mysql2/promise';
import { sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/mysql2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createEngine, RequestInProgressError, type ExecuteRequest } from '@idem/core';
import { createDrizzleStore, migrate } from '../src/index.ts';
import { CREATE_MYSQL_PAYMENTS, countMysqlPayments, payOnMysql } from './payments.ts';
import { mysqlSuitesRun, openMysqlTarget, type MysqlTarget } from './mysql-target.ts';

const request = (): ExecuteRequest => ({ scope: 'acct_1/payments.create', key: randomUUID(), fingerprint: 'fp-1' });

/** A promise and the function that settles it. */
function latch() {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { opened, open };
}

describe.skipIf(!(await mysqlSuitesRun()))('atomic mode on MySQL: the named lock on the key', () => {
  let target: MysqlTarget;
  // A second application instance: its own pool, so its requests never reuse the first one's connections.
  let otherPool: mysql.Pool;
  const first = () => createEngine({ store: createDrizzleStore(target.db) });
  const other = () => createEngine({ store: createDrizzleStore(drizzle(otherPool)) });

  beforeAll(async () => {
    target = await openMysqlTarget({ prefix: 'idem_atomic_lock_test' });
    await migrate(target.db);
    await target.db.execute(sql.raw(CREATE_MYSQL_PAYMENTS));
    otherPool = mysql.createPool({ uri: target.url, connectionLimit: 2 });
  });
  afterAll(async () => {
    await otherPool?.end();
    await target?.close();
  });

  it('E3: a duplicate gets 409 while the first handler is still running, without waiting for its transaction; once it commits the duplicate is replayed', async () => {
    const req = request();
    const entered = latch();
    const finish = latch();
    let runs = 0;
    const running = first().executeAtomic(req, async ({ tx }) => {
      runs++;
      await payOnMysql(tx, `pay_${req.key}`);
      entered.open();
      // Held open until the duplicate has been answered: had it waited on the uncommitted row
      // instead of the lock, this test would never get past the assertion below.
      await finish.opened;
      return { paymentId: `pay_${req.key}` };
    });
    await entered.opened;
    const duplicate = () =>
      other().executeAtomic(req, async () => {
        runs++;
        return { paymentId: 'twice' };
      });

    await expect(duplicate()).rejects.toBeInstanceOf(RequestInProgressError);
    finish.open();
    expect(await running).toMatchObject({ ok: true, replayed: false, value: { paymentId: `pay_${req.key}` } });
    // From the other instance's connections: a lock left on the first's would make this a 409.
    expect(await duplicate()).toMatchObject({ ok: true, replayed: true, value: { paymentId: `pay_${req.key}` } });
    expect(runs).toBe(1);
    expect(await countMysqlPayments(target.db)).toBe(1);
  });

  it('E4: when the handler throws, its write is rolled back, the lock is released with the transaction, and the other instance replays the error', async () => {
    const req = request();
    const before = await countMysqlPayments(target.db);
    const failed = await first().executeAtomic(req, async ({ tx }) => {
      await payOnMysql(tx, `pay_${req.key}`);
      throw new Error('card declined');
    });
    expect(failed).toMatchObject({ ok: false, replayed: false });
    const replay = await other().executeAtomic(req, async () => ({ paymentId: 'twice' }));
    expect(replay).toMatchObject({ ok: false, replayed: true });
    expect(await countMysqlPayments(target.db)).toBe(before);
  });
});
