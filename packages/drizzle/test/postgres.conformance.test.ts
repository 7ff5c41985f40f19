/** The core store contract, atomic mode included, on each PostgreSQL driver, on a real engine (drivers.ts). */
import { runStoreConformance } from '@idem/core/conformance';
import { sql } from 'drizzle-orm';
import { describe } from 'vitest';
import { createDrizzleStore, migrate } from '../src/index.ts';
import { DRIVERS, type DriverTarget } from './drivers.ts';
import { CREATE_PAYMENTS, payOnPostgres } from './payments.ts';

for (const spec of DRIVERS.filter((each) => each.dialect === 'postgres')) {
  if (!spec.runs) {
    describe.skip(`store conformance: drizzle, ${spec.name} (no PostgreSQL server reachable)`, () => {});
    continue;
  }
  // Group commit is on by default; the suite runs again with it off on one driver (issue 24).
  for (const groupCommit of spec.name === 'node-postgres' ? [true, false] : [true]) {
    describeConformance(spec, groupCommit);
  }
}

function describeConformance(spec: (typeof DRIVERS)[number], groupCommit: boolean) {
  let target: DriverTarget | undefined;
  runStoreConformance({
    name: `drizzle, ${spec.name}${groupCommit ? '' : ', groupCommit: false'}`,
    // PGlite runs inside this process: its now() is this process's Date.
    sharesProcessClock: spec.name === 'pglite',
    async createStore() {
      target = await spec.open();
      await migrate(target.db);
      await target.exec(CREATE_PAYMENTS);
      return createDrizzleStore(target.db, { groupCommit });
    },
    atomic: {
      write: payOnPostgres,
      committed: async (id) => (await target!.rows(sql`SELECT id FROM payments WHERE id = ${id}`)).length === 1,
    },
    teardown: async () => target?.close(),
  });
}
