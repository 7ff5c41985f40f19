/**
 * E8/E6 in atomic mode: core's model-based property test of recovery points
 * (`packages/core/test/support/steps-model.ts`) with the handler in the store's transaction, on
 * each atomic driver over a real database (libsql; node-postgres and postgres-js when a server
 * answers). Each step also writes an application row through `claim.tx`; a crashed process's
 * transaction rolls back as a lost connection's does, and the oracle counts the rows that
 * committed: each step's row commits exactly once per generation, with its stored result.
 */
import { sql } from 'drizzle-orm';
import type { BaseSQLiteDatabase } from 'drizzle-orm/sqlite-core';
import { afterAll, describe, it } from 'vitest';
import { checkStepsModel } from '../../core/test/support/steps-model.ts';
import { createDrizzleStore, migrate } from '../src/index.ts';
import { DRIVERS, type DriverTarget } from './drivers.ts';
import { CREATE_PAYMENTS, payOnPostgres, sqlitePayments } from './payments.ts';
import { sleep } from './store-behaviour.ts';

const LEASE_MS = 250;
const RUNS = Number(process.env.IDEM_STEPS_MODEL_RUNS ?? 60);

const atomicDrivers = DRIVERS.filter(
  (spec) => spec.runs && (spec.name === 'libsql' || spec.name === 'node-postgres' || spec.name === 'postgres-js'),
);

for (const spec of atomicDrivers) {
  describe(`E8/E6 model in atomic mode on ${spec.name}`, () => {
    let target: DriverTarget | undefined;
    afterAll(async () => {
      await target?.close();
    });

    it(`E8/E6: steps write through claim.tx; crashes roll the transaction back; replay and resume (${RUNS} runs): each step's write commits once per generation, with its stored result`, async () => {
      target = await spec.open();
      await migrate(target.db);
      await target.exec(CREATE_PAYMENTS);
      const store = createDrizzleStore(target.db);
      const opened = target;
      const write =
        spec.dialect === 'sqlite'
          ? async (tx: unknown, id: string) =>
              void (await (tx as BaseSQLiteDatabase<'async', unknown>).insert(sqlitePayments).values({ id }))
          : payOnPostgres;
      await checkStepsModel({
        store: () => store,
        passTime: async (ms) => void (await sleep(ms)),
        leaseMs: LEASE_MS,
        numRuns: RUNS,
        atomic: {
          write,
          committed: async (id) => (await opened.rows(sql`SELECT id FROM payments WHERE id = ${id}`)).length === 1,
        },
      });
    }, 600_000);
  });
}
