import type { Logger } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/mysql2';
import { afterEach, describe, expect, it } from 'vitest';
import { migrate, type DrizzleDatabase } from '../src/index.ts';
import { defineMysqlTables } from '../src/mysql/schema.ts';
import { MYSQL_MAX_GROUP } from '../src/mysql/groups.ts';
import { mysqlStatements } from '../src/mysql/statements.ts';
import type { FirstStep, StoreStatements } from '../src/store-statements.ts';
import { resolveTableNames } from '../src/table-names.ts';
import { CONCURRENT, groupCommitThroughTheStore } from './group-commit-behaviour.ts';
import { groupStatementsBehaviour, inserted, outcome, request } from './group-statements-behaviour.ts';
import { mysqlSuitesRun, openMysqlTarget } from './mysql-target.ts';

const GROUP = CONCURRENT;

/** Every statement drizzle sends, in order (drizzle logs a transaction's `begin` and `commit` too). */
class Counting implements Logger {
  statements: string[] = [];
  parameters: unknown[][] = [];
  logQuery(query: string, params: unknown[]) {
    this.statements.push(query);
    this.parameters.push(params);
  }
  async during(run: () => Promise<unknown>): Promise<string[]> {
    const start = this.statements.length;
    await run();
    return this.statements.slice(start);
  }
}

interface Opened {
  pool: import('mysql2/promise').Pool;
  statements: StoreStatements;
  logger: Counting;
  close(): Promise<void>;
}
const opened: Opened[] = [];
afterEach(async () => {
  for (const each of opened.splice(0)) await each.close();
});

async function open(): Promise<Opened & { db: DrizzleDatabase }> {
  const target = await openMysqlTarget({ prefix: 'idem_group_test' });
  await migrate(target.db);
  const logger = new Counting();
  const db = drizzle(target.pool, { logger });
  let closed = false;
  const each = {
    db,
    pool: target.pool,
    statements: mysqlStatements(db, defineMysqlTables(resolveTableNames({}))),
    logger,
    close: async () => {
      if (closed) return;
      closed = true;
      await target.close();
    },
  };
  opened.push(each);
  return each;
}

describe.skipIf(!(await mysqlSuitesRun()))('MySQL group commit (mysql2)', () => {
  groupStatementsBehaviour(open);

  it(`E1: ${GROUP} fresh claims go as one read and one transaction of two statements, ${GROUP} completions as one transaction of two`, async () => {
    const { statements: s, logger } = await open();
    const requests = Array.from({ length: GROUP }, () => request());
    let steps: Array<FirstStep | undefined> = [];
    const claimStatements = await logger.during(async () => (steps = await s.claimOrReadMany!(requests)));
    expect(claimStatements.map((q) => q.split(' ')[0]!.toLowerCase())).toEqual([
      'select',
      'begin',
      'insert',
      'select',
      'commit',
    ]);
    expect(claimStatements[2]).toMatch(/on duplicate key update/i);
    expect(steps.map((step) => inserted(step).token)).toEqual(requests.map((r) => r.token));

    let done: boolean[] = [];
    const completeStatements = await logger.during(
      async () =>
        (done = await s.completeMany!(
          requests.map((r, i) => ({ scope: r.scope, key: r.key, token: r.token, outcome: outcome(i) })),
        )),
    );
    expect(completeStatements.map((q) => q.split(' ')[0]!.toLowerCase())).toEqual([
      'begin',
      'select',
      'update',
      'commit',
    ]);
    expect(completeStatements[1]).toMatch(/for update$/i);
    expect(completeStatements[2]).toMatch(/^update .* join \(select .* union all select/i);
    expect(done).toEqual(requests.map(() => true));
    expect([...claimStatements, ...completeStatements].filter((q) => /\breturning\b/i.test(q))).toEqual([]);
  });

  it('a key too long for its column is left to the one-request path, which refuses it alone; the rest of the group is claimed', async () => {
    const { statements: s } = await open();
    const long = request('k'.repeat(600));
    const fine = request();
    const [a, b] = await s.claimOrReadMany!([long, fine]);
    expect(a).toBeUndefined();
    expect(inserted(b).token).toBe(fine.token);
    await expect(s.insertClaim(long)).rejects.toThrow(RangeError);
  });

  it("reads, locks and completes a group's rows by primary-key ranges, not by a scan (a scan FOR UPDATE would lock every row it reads)", async () => {
    const { statements: s, logger, pool } = await open();
    // A table of some size, so that the optimizer weighs a scan against the index as in production.
    for (let round = 0; round < 4; round++) await s.claimOrReadMany!(Array.from({ length: 500 }, () => request()));
    await pool.query('ANALYZE TABLE idem_keys');
    const requests = Array.from({ length: 32 }, () => request());
    for (const r of requests.slice(0, 16)) await s.claimOrRead(r);
    const start = logger.statements.length;
    await s.claimOrReadMany!(requests);
    await s.completeMany!(
      requests.map((r, i) => ({ scope: r.scope, key: r.key, token: r.token, outcome: outcome(i) })),
    );
    const sent = logger.statements.slice(start).map((query, i) => ({ query, params: logger.parameters[start + i]! }));
    const reads = sent.filter(({ query }) => /^(select|update) /i.test(query));
    expect(reads).toHaveLength(4); // the live read, the read back, the locking read, the update
    for (const { query, params } of reads) {
      const [plan] = await pool.query(`EXPLAIN ${query}`, params);
      const keysTable = (plan as Array<{ table: string; key: string | null; type: string }>).find(
        (row) => row.table === 'idem_keys',
      );
      expect([query.slice(0, 40), keysTable?.key]).toEqual([query.slice(0, 40), 'PRIMARY']);
      expect(['range', 'eq_ref', 'const']).toContain(keysTable?.type);
    }
  });

  it('refuses a group over the placeholder cap before writing anything', async () => {
    const { statements: s, logger } = await open();
    const requests = Array.from({ length: MYSQL_MAX_GROUP + 1 }, () => request());
    const sent = await logger.during(() => expect(s.claimOrReadMany!(requests)).rejects.toThrow(RangeError));
    expect(sent).toEqual([]);
  });
});

describe.skipIf(!(await mysqlSuitesRun()))('MySQL group commit through the store (mysql2)', () => {
  groupCommitThroughTheStore({
    label: 'mysql2',
    async open() {
      const { db, logger, close } = await open();
      let seen = 0;
      return {
        db,
        sent() {
          const since = logger.statements.length - seen;
          seen = logger.statements.length;
          return since;
        },
        close,
      };
    },
    // Alone: the read, the insert and the read back; grouped, the first four go alone (one per lane).
    counted: 'statements',
    alone: [3, 1],
    most: CONCURRENT / 2,
  });
});
