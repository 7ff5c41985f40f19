/**
 * Pins what src/drizzle-seams.ts relies on in drizzle beyond its documented API, for the drizzle
 * version this run resolves: `npm test` runs it on the installed drizzle-orm (0.45) and, as the
 * vitest projects `drizzle-orm@0.41`, `drizzle-orm@0.44` and `drizzle-orm@1.0`, on the npm aliases
 * drizzle-orm-041, drizzle-orm-044 and drizzle-orm-1 (vitest.config.ts). `IDEM_DRIZZLE_ORM` names the version a project expects.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as drizzleErrors from 'drizzle-orm/errors';
import { npmVersion } from 'drizzle-orm/version';
import { describe, expect, it } from 'vitest';
import { eq, sql } from 'drizzle-orm';
import { createDrizzleStore, migrate, pgIdemKeys, sqliteIdemKeys } from '../src/index.ts';
import { boundToConnection, entityKinds, isDrizzleQueryError, sessionOf } from '../src/drizzle-seams.ts';
import { isPgPool, openTransaction } from '../src/owned-transaction.ts';
import { detectDialect } from '../src/dialect.ts';
import { DRIVERS, rowsOfResult } from './drivers.ts';

/** drizzle's entity name of each driver's database class. */
const DATABASE_CLASS = {
  'node-postgres': 'NodePgDatabase',
  'postgres-js': 'PostgresJsDatabase',
  pglite: 'PgliteDatabase',
  'better-sqlite3': 'BetterSQLite3Database',
  libsql: 'LibSQLDatabase',
} as const;

describe(`drizzle seams on drizzle-orm ${npmVersion}`, () => {
  it('runs on the drizzle-orm version this project names', () => {
    expect(npmVersion.startsWith(process.env.IDEM_DRIZZLE_ORM ?? '0.45.')).toBe(true);
  });

  it.skipIf(process.env.IDEM_DRIZZLE_ORM !== undefined)(
    "libsql: createClient's timeout sets the busy timeout from @libsql/client 0.17.4 on; older clients (0.14, create-t3-app's) ignore it",
    async () => {
      const { createClient } = await import('@libsql/client');
      const directory = mkdtempSync(join(tmpdir(), 'idem-libsql-'));
      const client = createClient({ url: `file:${join(directory, 'busy.db')}`, timeout: 5000 });
      try {
        const { rows } = await client.execute('PRAGMA busy_timeout');
        const expected = process.env.IDEM_LIBSQL_CLIENT === 'libsql-client-014' ? 0 : 5000;
        expect(Number(Object.values(rows[0]!)[0])).toBe(expected);
      } finally {
        client.close();
        rmSync(directory, { recursive: true, force: true });
      }
    },
  );

  for (const spec of DRIVERS) {
    // PGlite is PostgreSQL compiled to WebAssembly: starting one took over 30 s under `npm run test:loaded`.
    describe.skipIf(!spec.runs)(spec.name, { timeout: spec.name === 'pglite' ? 180_000 : 30_000 }, () => {
      it('entityKinds names the driver class first and its dialect class among the ancestors; the driver is detected by it', async () => {
        const target = await spec.open();
        try {
          const kinds = entityKinds(target.db);
          expect(kinds[0]).toBe(DATABASE_CLASS[spec.name]);
          expect(
            kinds.some((kind) =>
              (spec.dialect === 'postgres' ? ['PgDatabase', 'PgAsyncDatabase'] : ['BaseSQLiteDatabase']).includes(kind),
            ),
          ).toBe(true);
          expect(detectDialect(target.db)).toMatchObject({ dialect: spec.dialect, driver: { name: spec.name } });
        } finally {
          await target.close();
        }
      });

      it('E1/E2: the rows of a fresh claim and of a replay (SQLite: mapped by position) are what drizzle maps for get()', async () => {
        const target = await spec.open();
        try {
          await migrate(target.db);
          const store = createDrizzleStore(target.db);
          const request = {
            scope: 's',
            key: randomUUID(),
            fingerprint: 'f',
            token: 't1',
            leaseMs: 60_000,
            retentionMs: 60_000,
            expiredReuse: 'execute',
          } as const;
          const fresh = await store.claim(request);
          expect(fresh).toMatchObject({
            outcome: 'claimed',
            record: { state: 'processing', generation: 1, token: 't1', outcome: null, completedAt: null },
          });
          expect(fresh.record).toEqual(await store.get('s', request.key));
          await store.complete({
            scope: 's',
            key: request.key,
            token: 't1',
            outcome: { kind: 'success', status: 201, body: '{"id":1}' },
          });
          const replay = await store.claim({ ...request, token: 't2' });
          expect(replay).toMatchObject({
            outcome: 'existing',
            expired: false,
            record: { state: 'completed', token: 't1', outcome: { kind: 'success', status: 201, body: '{"id":1}' } },
          });
          expect(replay.record).toEqual(await store.get('s', request.key));
          expect(replay.record.completedAt).toBeInstanceOf(Date);
          if (replay.outcome !== 'existing') throw new Error('expected a replay');
          expect(replay.now).toBeInstanceOf(Date);
          expect(Math.abs(replay.now.getTime() - Date.now())).toBeLessThan(60_000);
        } finally {
          await target.close();
        }
      });

      it(
        spec.name === 'node-postgres'
          ? 'boundToConnection: drizzle runs its whole transaction (BEGIN, savepoint, COMMIT) on the bound pool client and releases nothing; openTransaction gives the client back'
          : "openTransaction: no pool behind the session, so it is drizzle's own db.transaction",
        async () => {
          const target = await spec.open();
          try {
            const session = sessionOf(target.db);
            if (spec.name !== 'node-postgres') {
              expect(isPgPool(session?.client)).toBe(false);
              if (spec.dialect === 'postgres') {
                const db = target.db as import('drizzle-orm/pg-core').PgDatabase<any>;
                await expect(openTransaction(db, async () => 'done')).resolves.toBe('done');
              }
              return;
            }
            const pool = (target.db as unknown as { $client: import('pg').Pool }).$client;
            expect(session?.client).toBe(pool);
            expect(isPgPool(pool)).toBe(true);
            const client = await pool.connect();
            try {
              const backend = async (tx: { execute(query: unknown): Promise<unknown> }) =>
                Number(rowsOfResult<{ pid: number }>(await tx.execute(sql`SELECT pg_backend_pid() AS pid`))[0]!.pid);
              const pids = (await boundToConnection(session!, client).transaction(async (tx: never) => {
                const outer = await backend(tx);
                const nested = await (
                  tx as { transaction(body: (nested: never) => Promise<number>): Promise<number> }
                ).transaction(async (inner) => backend(inner));
                return [outer, nested];
              })) as number[];
              // pg's Client knows its backend's pid (not in @types/pg).
              const { processID } = client as unknown as { processID: number };
              expect(pids).toEqual([processID, processID]);
              // Still checked out: drizzle released nothing.
              expect(pool.totalCount - pool.idleCount).toBe(1);
            } finally {
              client.release();
            }
            const db = target.db as import('drizzle-orm/pg-core').PgDatabase<any>;
            await expect(openTransaction(db, async () => 'done')).resolves.toBe('done');
            expect(pool.totalCount - pool.idleCount).toBe(0);
          } finally {
            await target.close();
          }
        },
      );

      it("K5: drizzle's query errors are told by isDrizzleQueryError: DrizzleQueryError on 0.44 and later, none before (the driver's error, without the parameters)", async () => {
        const target = await spec.open();
        try {
          // No migrate(): the statement fails on the missing table.
          const table = spec.dialect === 'postgres' ? pgIdemKeys : sqliteIdemKeys;
          const key = `parameter-${randomUUID()}`;
          const error = await (async () => {
            const query = (target.db as any).select().from(table).where(eq(table.key, key));
            return spec.dialect === 'postgres' ? await query : await query.all();
          })().then(
            () => undefined,
            (rejection: unknown) => rejection,
          );
          expect(error).toBeInstanceOf(Error);
          const wrapped = !/^0\.4[1-3]\./.test(npmVersion);
          expect('DrizzleQueryError' in drizzleErrors).toBe(wrapped);
          // better-sqlite3 prepares synchronously, and drizzle before 1.0 does not wrap what its prepare throws.
          const direct = spec.name === 'better-sqlite3' && !npmVersion.startsWith('1.');
          expect(isDrizzleQueryError(error)).toBe(wrapped && !direct);
          expect(isDrizzleQueryError((error as Error).cause)).toBe(false);
          if (!wrapped) expect((error as Error).message).not.toContain(key);
          expect(isDrizzleQueryError(new Error('plain'))).toBe(false);
        } finally {
          await target.close();
        }
      });
    });
  }
});
