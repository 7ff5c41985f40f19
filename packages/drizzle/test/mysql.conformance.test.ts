import { describe } from 'vitest';
import { runStoreConformance } from '@idem/core/conformance';
import { createDrizzleStore, migrate } from '../src/index.ts';
import { mysqlSuitesRun, openMysqlTarget, type MysqlTarget } from './mysql-target.ts';

let target: MysqlTarget | undefined;

describe.skipIf(!(await mysqlSuitesRun()))('MySQL (mysql2) at MYSQL_URL', () => {
  runStoreConformance({
    name: 'drizzle, MySQL server over mysql2 (own database)',
    async createStore() {
      target = await openMysqlTarget();
      await migrate(target.db);
      return createDrizzleStore(target.db);
    },
    teardown: async () => target?.close(),
  });
});
