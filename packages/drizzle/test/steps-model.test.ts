/**
 * E8/E6: core's model-based property test of recovery points and the two failure modes
 * (`packages/core/test/support/steps-model.ts`, fast-check against a model of what the client
 * must see) on the drizzle store over real databases: SQLite (better-sqlite3, libsql),
 * PostgreSQL (node-postgres; PGlite without a server) and MySQL (mysql2, when a server answers). The store's clock is the database's, so
 * time passes by sleeping: the lease is short, and a crashed execution is taken over once it has
 * passed. Fewer runs than on MemoryStore (each crash costs a lease of real time).
 */
import { afterAll, beforeAll, describe, it } from 'vitest';
import { checkStepsModel } from '../../core/test/support/steps-model.ts';
import { createDrizzleStore, migrate, type DrizzleDatabase, type DrizzleStore } from '../src/index.ts';
import { DRIVERS } from './drivers.ts';
import { mysqlSuitesRun, openMysqlTarget } from './mysql-target.ts';
import { sleep } from './store-behaviour.ts';

const LEASE_MS = 250;
const RUNS = Number(process.env.IDEM_STEPS_MODEL_RUNS ?? 100);

const targets = DRIVERS.filter(
  (spec) =>
    spec.runs &&
    (spec.name === 'better-sqlite3' ||
      spec.name === 'libsql' ||
      spec.name === 'node-postgres' ||
      (spec.name === 'pglite' && !DRIVERS.some((each) => each.name === 'node-postgres' && each.runs))),
);

const opens: Array<{ name: string; open: () => Promise<{ db: DrizzleDatabase; close(): Promise<void> }> }> = [
  ...targets.map((spec) => ({ name: spec.name, open: () => spec.open() })),
  ...((await mysqlSuitesRun()) ? [{ name: 'mysql2', open: () => openMysqlTarget() }] : []),
];

for (const { name, open } of opens) {
  describe(`E8/E6 model: recovery points and the two failure modes on ${name}`, () => {
    let target: { db: DrizzleDatabase; close(): Promise<void> } | undefined;
    let store: DrizzleStore;
    beforeAll(async () => {
      target = await open();
      await migrate(target.db);
      store = createDrizzleStore(target.db);
    }, 120_000);
    afterAll(async () => {
      await target?.close();
    });

    it(`E8/E6: random handlers of 1–5 steps, failures and crashes before, inside and after a step, retries and takeovers, replay and resume (${RUNS} runs): each step completes once per generation, the answer matches the steps, v1 outcomes never change`, async () => {
      await checkStepsModel({
        store: () => store,
        passTime: async (ms) => void (await sleep(ms)),
        leaseMs: LEASE_MS,
        numRuns: RUNS,
      });
    }, 600_000);
  });
}
