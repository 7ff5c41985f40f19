/** The core store contract on each PostgreSQL driver, on a real engine (drivers.ts). */
import { runStoreConformance } from '@idem/core/conformance';
import { describe } from 'vitest';
import { createDrizzleStore, migrate } from '../src/index.ts';
import { DRIVERS, type DriverTarget } from './drivers.ts';

for (const spec of DRIVERS.filter((each) => each.dialect === 'postgres')) {
  if (!spec.runs) {
    describe.skip(`store conformance: drizzle, ${spec.name} (no PostgreSQL server reachable)`, () => {});
    continue;
  }
  let target: DriverTarget | undefined;
  runStoreConformance({
    name: `drizzle, ${spec.name}`,
    // PGlite runs inside this process: its now() is this process's Date.
    sharesProcessClock: spec.name === 'pglite',
    async createStore() {
      target = await spec.open();
      await migrate(target.db);
      return createDrizzleStore(target.db);
    },
    teardown: async () => target?.close(),
  });
}
