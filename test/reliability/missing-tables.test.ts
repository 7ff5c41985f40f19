/**
 * E5: a store over a database without its tables (no `idem migrate`, or the tables created under
 * another prefix: create-t3-app's `t3app_`) is a configuration error, said loudly. Every request
 * used to answer a bare 503 `idempotency_store_unavailable` while the server logged nothing. Now
 * the first request logs one `[idem]` line naming the tables the store looked for, the 503's
 * detail names them too, and nothing runs; better-sqlite3, which prepares its statements when the
 * store is created, refuses at start-up with the same error. Tables of a previous release that
 * lack a later migration's columns (E8's on_failure, attempts, steps) are refused the same way,
 * naming the missing columns and the migration that adds them.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { StoreConfigurationError } from '@idem/core';
import { sql } from 'drizzle-orm';
import { createDrizzleStore, migrate } from '@idem/drizzle';
import { idempotent } from '@idem/fetch';
import { withoutParameters } from '../../packages/drizzle/src/query-errors.ts';
import { DRIVERS, type DriverTarget } from '../../packages/drizzle/test/drivers.ts';
import { mysqlSuitesRun, openMysqlTarget } from '../../packages/drizzle/test/mysql-target.ts';

const TABLES = { prefix: 'nowhere_' };
const NAMES = ['nowhere_idem_keys', 'nowhere_idem_key_history'];
const mysqlRuns = await mysqlSuitesRun();

afterEach(() => {
  vi.restoreAllMocks();
});

/** Two keyed requests through a Fetch route over `store`; what they answer, what ran, what was logged. */
async function twoRequests(db: DriverTarget['db'], tables: { prefix?: string } = TABLES) {
  const logged = vi.spyOn(console, 'error').mockImplementation(() => {});
  let ran = 0;
  const route = idempotent(
    async () => {
      ran += 1;
      return Response.json({ ok: true }, { status: 201 });
    },
    { store: createDrizzleStore(db, { tables }), principal: () => 'someone' },
  );
  const answers = [];
  for (const key of ['"k-1"', '"k-2"']) {
    const response = await route(
      new Request('http://localhost/api/orders', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': key },
        body: '{"amount":1}',
      }),
    );
    answers.push({ status: response.status, body: (await response.json()) as { code: string; detail: string } });
  }
  return { answers, ran, lines: logged.mock.calls.map((call) => call.map(String).join(' ')) };
}

function expectLoudRefusal({ answers, ran, lines }: Awaited<ReturnType<typeof twoRequests>>, names = NAMES) {
  expect(ran).toBe(0);
  for (const { status, body } of answers) {
    expect(status).toBe(503);
    expect(body.code).toBe('idempotency_store_unavailable');
    for (const name of names) expect(body.detail).toContain(name);
  }
  // One line for the misconfiguration, not one per request.
  expect(lines).toHaveLength(1);
  expect(lines[0]).toMatch(/^\[idem\] /);
  for (const name of names) expect(lines[0]).toContain(name);
}

/** The tables as the previous release left them: migrated, then E8's columns (on_failure, attempts, steps) dropped. */
async function withoutE8Columns(exec: (statement: string) => Promise<unknown>) {
  for (const table of ['idem_keys', 'idem_key_history'])
    for (const column of E8_COLUMNS) await exec(`ALTER TABLE ${table} DROP COLUMN ${column}`);
}
const E8_COLUMNS = ['on_failure', 'attempts', 'steps'];

describe('E5: a store whose tables do not exist says so, naming them', () => {
  for (const spec of DRIVERS) {
    it.runIf(spec.runs)(
      `${spec.name}: ${spec.name === 'better-sqlite3' ? 'refuses at start-up' : 'answers 503 naming the tables, and logs it once'}`,
      async () => {
        const target = await spec.open();
        try {
          if (spec.name === 'better-sqlite3') {
            const creating = () => createDrizzleStore(target.db, { tables: TABLES });
            expect(creating).toThrow(StoreConfigurationError);
            expect(creating).toThrow(NAMES[0]);
            expect(creating).toThrow(NAMES[1]);
          } else {
            expectLoudRefusal(await twoRequests(target.db));
          }
        } finally {
          await target.close();
        }
      },
    );
  }

  it.runIf(mysqlRuns)('mysql2: answers 503 naming the tables, and logs it once', async () => {
    const target = await openMysqlTarget();
    try {
      expectLoudRefusal(await twoRequests(target.db));
    } finally {
      await target.close();
    }
  });

  for (const spec of DRIVERS.filter((each) => each.name !== 'better-sqlite3')) {
    it.runIf(spec.runs)(
      `E8 upgrade, ${spec.name}: tables of the previous release (no on_failure, attempts, steps) answer 503 naming the missing columns, logged once`,
      async () => {
        const target = await spec.open();
        try {
          await migrate(target.db);
          await withoutE8Columns((statement) => target.exec(statement));
          expectLoudRefusal(await twoRequests(target.db, {}), ['idem_keys', ...E8_COLUMNS, 'idem migrate']);
        } finally {
          await target.close();
        }
      },
    );
  }

  it.runIf(mysqlRuns)(
    'E8 upgrade, mysql2: tables of the previous release answer 503 naming the missing columns, logged once',
    async () => {
      const target = await openMysqlTarget();
      try {
        await migrate(target.db);
        await withoutE8Columns((statement) => target.db.execute(sql.raw(statement)));
        expectLoudRefusal(await twoRequests(target.db, {}), ['idem_keys', ...E8_COLUMNS, 'idem migrate']);
      } finally {
        await target.close();
      }
    },
  );

  it('a store that is merely down still answers the plain 503, and logs nothing of its own', async () => {
    const logged = vi.spyOn(console, 'error').mockImplementation(() => {});
    const down = {
      claim: () => Promise.reject(new Error('connect ECONNREFUSED 127.0.0.1:5432')),
    } as unknown as ReturnType<typeof createDrizzleStore>;
    const route = idempotent(async () => new Response('ran'), { store: down, principal: () => 'someone' });
    const response = await route(
      new Request('http://localhost/api/orders', { method: 'POST', headers: { 'idempotency-key': '"k"' }, body: '{}' }),
    );
    expect(response.status).toBe(503);
    expect(((await response.json()) as { detail: string }).detail).toMatch(/unavailable.*Retry later/);
    expect(logged).not.toHaveBeenCalled();
  });

  it("only the store's own tables: another table missing (a handler's, in an atomic transaction) stays the driver's error", () => {
    const tables = { keys: 'idem_keys', history: 'idem_key_history' };
    const driverError = (message: string, fields: object) => Object.assign(new Error(message), fields);
    const theirs = [
      driverError('no such table: payments_ledger', { code: 'SQLITE_ERROR' }),
      driverError('relation "payments_ledger" does not exist', { code: '42P01' }),
      driverError("Table 'test.payments_ledger' doesn't exist", { code: 'ER_NO_SUCH_TABLE', errno: 1146 }),
    ];
    for (const error of theirs) expect(withoutParameters(error, tables)).toBe(error);
    const ours = [
      driverError('no such table: idem_keys', { code: 'SQLITE_ERROR' }),
      driverError('relation "app.idem_key_history" does not exist', { code: '42P01' }),
      driverError("Table 'test.idem_keys' doesn't exist", { code: 'ER_NO_SUCH_TABLE', errno: 1146 }),
    ];
    for (const error of ours) expect(withoutParameters(error, tables)).toBeInstanceOf(StoreConfigurationError);
  });
});
