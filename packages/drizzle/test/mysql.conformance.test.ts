import { describe, expect, it } from 'vitest';
import { runStoreConformance } from '@idem/core/conformance';
import { createDrizzleStore, migrate } from '../src/index.ts';
import { mariadbOnlyStatements, mysqlSuitesRun, openMysqlTarget, type MysqlTarget } from './mysql-target.ts';

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

  it('sent no statement that MySQL 8 would refuse (RETURNING), although MariaDB runs them', () => {
    expect(mariadbOnlyStatements).toEqual([]);
  });
});
