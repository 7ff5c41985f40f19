/**
 * Issue 31, item 1: the store comes back after a burst of connection losses. The payments
 * example in atomic mode (`IDEM_ATOMIC=1`: every payment is a transaction of the store's), with
 * its sweeper running every 100 ms (a transaction for the sweep lock each round) and a retention
 * of 3 s (so that rounds archive and keys expire), takes bursts of concurrent payments while
 * every backend of its pool is terminated again and again (`pg_terminate_backend`, selected by
 * the `application_name` its connection string sets). Then the terminations stop: `/healthz`
 * answers 200 again, a fresh payment succeeds, and the server holds no more connections than its
 * pool's ten.
 *
 * Before the fix, drizzle-orm's node-postgres `transaction()` leaked the pool client of every
 * transaction whose `BEGIN` met a dead connection: after ten such losses every request and
 * `/healthz` answered 503 for good while PostgreSQL was up. Written for both PostgreSQL drivers
 * (node-postgres, postgres-js; the example's `DATABASE_DRIVER`); postgres-js is skipped, below.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { databaseUrl } from '../../packages/drizzle/test/pg-target.ts';
import { POSTGRES_SCHEMA, type SharedDatabase } from './support/databases.ts';
import { ExampleFleet } from './support/example-server.ts';
import { getJson, pollUntil, sleep } from './support/http.ts';
import { restPayments } from './support/payments.ts';

const INPUT = { amount: 1200, currency: 'EUR' };
/** Bursts of concurrent payments, and rounds of terminations between them. */
const BURST = 64;
const ROUNDS = 40;

describe.skipIf(!POSTGRES_SCHEMA.available)(
  'the payments example after bursts of connection losses (atomic mode, sweeper on)',
  () => {
    const fleet = new ExampleFleet();
    let database: SharedDatabase;
    let admin: pg.Client;

    beforeAll(async () => {
      database = await POSTGRES_SCHEMA.open();
      admin = new pg.Client({ connectionString: databaseUrl(), application_name: 'idem-terminator' });
      await admin.connect();
    });
    afterAll(async () => {
      await fleet.killAll();
      await admin?.end();
      await database?.close();
    });

    const backendsOf = async (application: string) =>
      Number(
        (
          await admin.query<{ n: string }>('SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = $1', [
            application,
          ])
        ).rows[0]!.n,
      );

    for (const driver of ['node-postgres', 'postgres-js'] as const) {
      // postgres.js 3.4.9 kills the process under these terminations: `nextWrite` writes to the
      // socket that `closed()` already set to null, from a setImmediate callback, so the TypeError
      // is an uncaught exception no caller can catch (porsager/postgres#1154, #1208; unmerged
      // fixes #1168, #1209). The store has nothing to release there: postgres.js reserves the
      // transaction's connection itself. Run this case again once a fixed postgres.js is out.
      it.skipIf(driver === 'postgres-js')(
        `${driver}: after every backend was terminated again and again under load and during sweeps, /healthz answers 200 and a fresh payment succeeds`,
        {
          timeout: 180_000,
        },
        async () => {
          const application = `idem-http-loss-${randomBytes(4).toString('hex')}`;
          const url = new URL(database.url);
          url.searchParams.set('application_name', application);
          const server = await fleet.start({
            databaseUrl: url.toString(),
            atomic: true,
            ttl: '3s',
            lease: '2s',
            name: `payments on ${driver}`,
            env: { DATABASE_DRIVER: driver, IDEM_SWEEP_EVERY: '100ms' },
          });
          // The terminations select the example's connections by the name its URL gives them.
          await pollUntil(async () => ((await backendsOf(application)) > 0 ? true : undefined), {
            intervalMs: 50,
            timeoutMs: 20_000,
          });

          let stop = false;
          const statuses = new Map<number, number>();
          const load = (async () => {
            while (!stop) {
              await Promise.all(
                Array.from({ length: BURST }, async () => {
                  const answer = await restPayments
                    .create(server.url, INPUT, { key: randomUUID(), account: 'loss' })
                    .catch(() => ({ status: 0 }));
                  statuses.set(answer.status, (statuses.get(answer.status) ?? 0) + 1);
                }),
              );
            }
          })();
          let terminated = 0;
          for (let round = 0; round < ROUNDS; round++) {
            const { rows } = await admin.query<{ n: string }>(
              'SELECT count(pg_terminate_backend(pid)) AS n FROM pg_stat_activity WHERE application_name = $1',
              [application],
            );
            terminated += Number(rows[0]!.n);
            await sleep(30 + ((round * 37) % 90));
          }
          stop = true;
          await load;

          // The losses were real: backends died, payments failed, and sweeper rounds failed too.
          expect(terminated).toBeGreaterThan(0);
          expect(statuses.get(201) ?? 0).toBeGreaterThan(0);
          expect([...statuses.keys()].some((status) => status !== 201)).toBe(true);
          expect(server.lines.some((line) => line.includes('[payments] sweep failed'))).toBe(true);

          // The terminations stopped: the store serves again.
          let last: unknown;
          const health = await pollUntil(
            async () => {
              const answer = await getJson(`${server.url}/healthz`).catch((error: unknown) => ({ error }));
              last = answer;
              return 'status' in answer && answer.status === 200 ? answer : undefined;
            },
            { intervalMs: 200, timeoutMs: 30_000 },
          ).catch((error: Error) => {
            throw new Error(
              `${error.message}: /healthz still answers ${JSON.stringify(last)}; the server's last lines:\n${server.lines.slice(-12).join('\n')}`,
            );
          });
          expect(health.body).toEqual({ status: 'ok' });
          const fresh = await restPayments.create(server.url, INPUT, { key: randomUUID(), account: 'after' });
          expect(fresh.status).toBe(201);
          expect(restPayments.payment(fresh)).toMatchObject(INPUT);
          // A burst goes through whole: no pool client was lost for good.
          const burst = await Promise.all(
            Array.from({ length: 32 }, () =>
              restPayments.create(server.url, INPUT, { key: randomUUID(), account: 'after' }),
            ),
          );
          expect(burst.map((answer) => answer.status)).toEqual(burst.map(() => 201));
          expect(await backendsOf(application)).toBeLessThanOrEqual(10);
          await server.kill();
        },
      );
    }
  },
);
