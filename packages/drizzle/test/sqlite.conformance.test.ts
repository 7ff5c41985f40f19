import { runStoreConformance } from '@idem/core/conformance';
import { createDrizzleStore, migrate } from '../src/index.ts';
import { openSqliteTarget, type SqliteTarget } from './sqlite-target.ts';

let target: SqliteTarget | undefined;

runStoreConformance({
  name: 'drizzle, SQLite file in WAL mode',
  async createStore() {
    target = await openSqliteTarget();
    await migrate(target.db);
    return createDrizzleStore(target.db);
  },
  teardown: async () => target?.close(),
});
