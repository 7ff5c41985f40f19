/** The core store contract on each SQLite driver, on a real engine (drivers.ts); atomic mode on libsql. */
import { runStoreConformance } from '@idem/core/conformance';
import { sql } from 'drizzle-orm';
import type { BaseSQLiteDatabase } from 'drizzle-orm/sqlite-core';
import { createDrizzleStore, migrate } from '../src/index.ts';
import { DRIVERS, type DriverTarget } from './drivers.ts';
import { CREATE_PAYMENTS, sqlitePayments } from './payments.ts';

for (const spec of DRIVERS.filter((each) => each.dialect === 'sqlite')) {
  // Group commit is on by default; the suite runs again with it off on one driver.
  for (const groupCommit of spec.name === 'better-sqlite3' ? [true, false] : [true]) {
    describeConformance(spec, groupCommit);
  }
}

function describeConformance(spec: (typeof DRIVERS)[number], groupCommit: boolean) {
  let target: DriverTarget | undefined;
  runStoreConformance({
    name: `drizzle, ${spec.name}${groupCommit ? '' : ', groupCommit: false'}`,
    async createStore() {
      target = await spec.open();
      await migrate(target.db);
      await target.exec(CREATE_PAYMENTS);
      return createDrizzleStore(target.db, { groupCommit });
    },
    // better-sqlite3 has no atomic mode: its transactions cannot span an await.
    ...(spec.name === 'libsql' && {
      atomic: {
        write: async (tx, id) =>
          void (await (tx as BaseSQLiteDatabase<'async', unknown>).insert(sqlitePayments).values({ id })),
        committed: async (id) => (await target!.rows(sql`SELECT id FROM payments WHERE id = ${id}`)).length === 1,
      },
    }),
    teardown: async () => target?.close(),
  });
}
