import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { runStoreConformance } from '@idem/core/conformance';
import { createDrizzleStore, migrate } from '../src/index.ts';
import { CREATE_MYSQL_PAYMENTS, payOnMysql } from './payments.ts';
import { executedRows } from '../src/mysql/rows.ts';
import { mariadbOnlyStatements, mysqlSuitesRun, openMysqlTarget, type MysqlTarget } from './mysql-target.ts';

let target: MysqlTarget | undefined;

describe.skipIf(!(await mysqlSuitesRun()))('MySQL (mysql2) at MYSQL_URL', () => {
  // Group commit is on by default; the suite runs again with it off.
  for (const groupCommit of [true, false]) {
    runStoreConformance({
      name: `drizzle, MySQL server over mysql2 (own database)${groupCommit ? '' : ', groupCommit: false'}`,
      async createStore() {
        target = await openMysqlTarget();
        await migrate(target.db);
        await target.db.execute(sql.raw(CREATE_MYSQL_PAYMENTS));
        return createDrizzleStore(target.db, { groupCommit });
      },
      atomic: {
        write: payOnMysql,
        committed: async (id) =>
          executedRows(await target!.db.execute(sql`SELECT id FROM payments WHERE id = ${id}`)).length === 1,
      },
      teardown: async () => target?.close(),
    });
  }

  it('sent no statement that MySQL 8 would refuse (RETURNING), although MariaDB runs them', () => {
    expect(mariadbOnlyStatements).toEqual([]);
  });
});
