import { runStoreConformance } from '@idem/core/conformance';
import { createDrizzleStore, migrate } from '../src/index.ts';
import { isServerReachable, openPostgresTarget, postgresRequired, type PostgresTarget } from './pg-target.ts';

let target: PostgresTarget | undefined;
const server = (await isServerReachable()) || postgresRequired();

runStoreConformance({
  name: server ? 'drizzle, PostgreSQL server (own schema)' : 'drizzle, PostgreSQL on PGlite (no server reachable)',
  // PGlite runs inside this process: its now() is this process's Date.
  sharesProcessClock: !server,
  async createStore() {
    target = await openPostgresTarget();
    await migrate(target.db);
    return createDrizzleStore(target.db);
  },
  teardown: async () => target?.close(),
});
