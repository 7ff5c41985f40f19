/**
 * The core store contract, atomic mode included, on the Drizzle PostgreSQL store behind core's
 * `withLocalCache` (issue 34): the decorator answers replays from memory and must keep every rule.
 */
import { runStoreConformance } from '@idem/core/conformance';
import { withLocalCache } from '@idem/core/store';
import { sql } from 'drizzle-orm';
import { describe } from 'vitest';
import { createDrizzleStore, migrate } from '../src/index.ts';
import { DRIVERS, type DriverTarget } from './drivers.ts';
import { CREATE_PAYMENTS, payOnPostgres } from './payments.ts';

const spec = DRIVERS.find((each) => each.dialect === 'postgres' && each.name === 'node-postgres');
if (!spec?.runs) {
  describe.skip('store conformance: drizzle, node-postgres, withLocalCache (no PostgreSQL server reachable)', () => {});
} else {
  let target: DriverTarget | undefined;
  runStoreConformance({
    name: 'drizzle, node-postgres, withLocalCache',
    async createStore() {
      target = await spec.open();
      await migrate(target.db);
      await target.exec(CREATE_PAYMENTS);
      return withLocalCache(createDrizzleStore(target.db));
    },
    atomic: {
      write: payOnPostgres,
      committed: async (id) => (await target!.rows(sql`SELECT id FROM payments WHERE id = ${id}`)).length === 1,
    },
    teardown: async () => target?.close(),
  });
}
