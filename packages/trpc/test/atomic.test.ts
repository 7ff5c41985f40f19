/**
 * Atomic mode over real HTTP on PostgreSQL (a fresh schema): the resolver writes through
 * `idempotencyClaim(ctx).tx`, and its write commits with the claim and the stored outcome, or
 * not at all. On SQLite the option is refused: a tRPC resolver awaits, a better-sqlite3
 * transaction cannot.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initTRPC, TRPCError } from '@trpc/server';
import { z } from 'zod';
import { createDrizzleStore, migrate, type DrizzleStore } from '@idem/drizzle';
import { sql } from 'drizzle-orm';
import type { BaseSQLiteDatabase } from 'drizzle-orm/sqlite-core';
import { CREATE_PAYMENTS, countPgPayments, payOnPostgres, sqlitePayments } from '../../drizzle/test/payments.ts';
import { driverSpec } from '../../drizzle/test/drivers.ts';
import { openPostgresTarget } from '../../drizzle/test/pg-target.ts';
import { openSqliteTarget } from '../../drizzle/test/sqlite-target.ts';
import { idempotency, idempotencyClaim, idempotencyErrorFormatter } from '../src/index.ts';
import type { AppContext } from './app.ts';
import { clientFor, mutate, newKey, startStandalone, type RunningServer } from './http.ts';

/** A database with the payments table: the app's resolvers write one row through the claim's transaction. */
interface PaymentsDatabase {
  store: DrizzleStore;
  pay(tx: unknown, paymentId: string): Promise<unknown>;
  count(): Promise<number>;
  close(): Promise<void>;
}

async function postgresPayments(): Promise<PaymentsDatabase> {
  const target = await openPostgresTarget({ schemaPrefix: 'idem_trpc_atomic' });
  await migrate(target.db);
  await target.db.execute(sql.raw(CREATE_PAYMENTS));
  return {
    store: createDrizzleStore(target.db),
    pay: payOnPostgres,
    count: () => countPgPayments(target.db),
    close: () => target.close(),
  };
}

/** libsql on a local file: its transactions hold a connection of their own, so a resolver may await inside. */
async function libsqlPayments(): Promise<PaymentsDatabase> {
  const target = await driverSpec('libsql').open();
  await migrate(target.db);
  await target.exec(CREATE_PAYMENTS);
  type Sqlite = BaseSQLiteDatabase<'async', unknown>;
  return {
    store: createDrizzleStore(target.db),
    pay: (tx, paymentId) => (tx as Sqlite).insert(sqlitePayments).values({ id: paymentId }),
    count: async () =>
      (await (target.db as Sqlite).select({ n: sql<number>`count(*)` }).from(sqlitePayments))[0]?.n ?? 0,
    close: () => target.close(),
  };
}

function createAtomicApp({ store, pay }: PaymentsDatabase) {
  const calls = { pay: 0, declinedPay: 0, reserve: 0, charge: 0 };
  const t = initTRPC.context<AppContext>().create({ errorFormatter: idempotencyErrorFormatter, isDev: false });
  const atomic = idempotency({ store, principal: (ctx: AppContext) => ctx.user, atomic: true });
  const atomicResume = idempotency({
    store,
    principal: (ctx: AppContext) => ctx.user,
    atomic: true,
    onFailure: 'resume',
  });
  const payment = z.object({ paymentId: z.string(), amount: z.number().int().positive() });
  const router = t.router({
    pay: t.procedure
      .input(payment)
      .use(atomic)
      .mutation(async ({ ctx, input }) => {
        calls.pay++;
        await pay(idempotencyClaim(ctx)?.tx, input.paymentId);
        return { paymentId: input.paymentId, amount: input.amount };
      }),
    /** E8: two steps writing through the transaction; the first charge fails after its write. */
    payInSteps: t.procedure
      .input(payment)
      .use(atomicResume)
      .mutation(async ({ ctx, input }) => {
        const claim = idempotencyClaim(ctx)!;
        await claim.step('reserve', async () => {
          calls.reserve++;
          await pay(claim.tx, `${input.paymentId}-reserved`);
        });
        await claim.step('charge', async () => {
          calls.charge++;
          await pay(claim.tx, `${input.paymentId}-charged`);
          if (calls.charge === 1) throw new Error('provider timeout');
        });
        return { paymentId: input.paymentId, attempt: claim.attempt };
      }),
    declinedPay: t.procedure
      .input(payment)
      .use(atomic)
      .mutation(async ({ ctx, input }): Promise<never> => {
        calls.declinedPay++;
        await pay(idempotencyClaim(ctx)?.tx, input.paymentId);
        throw new TRPCError({ code: 'PRECONDITION_FAILED', message: 'card declined' });
      }),
  });
  return { router, calls };
}

describe.each([
  { database: 'PostgreSQL', open: postgresPayments },
  { database: 'SQLite through libsql', open: libsqlPayments },
])('@idem/trpc atomic mode over HTTP on $database', ({ open }) => {
  let target: PaymentsDatabase;
  let app: ReturnType<typeof createAtomicApp>;
  let server: RunningServer;
  const countPayments = () => target.count();

  beforeAll(async () => {
    target = await open();
    app = createAtomicApp(target);
    server = await startStandalone(app.router);
  });
  afterAll(async () => {
    await server?.close();
    await target?.close();
  });

  it('E1, E2: the resolver’s write through idempotencyClaim(ctx).tx commits with the outcome; a retry replays the stored output and the write count stays 1', async () => {
    const { trpc, lastHeaders } = clientFor<typeof app.router>(server.url, { key: newKey() });
    const before = await countPayments();
    const first = await trpc.pay.mutate({ paymentId: 'pay_trpc_1', amount: 42 });
    expect(first).toEqual({ paymentId: 'pay_trpc_1', amount: 42 });
    expect(lastHeaders().get('idempotent-replayed')).toBeNull();
    expect(await countPayments()).toBe(before + 1);

    expect(await trpc.pay.mutate({ paymentId: 'pay_trpc_1', amount: 42 })).toEqual(first);
    expect(lastHeaders().get('idempotent-replayed')).toBe('true');
    expect(app.calls.pay).toBe(1);
    expect(await countPayments()).toBe(before + 1);
  });

  it('E4: a resolver error rolls its write back; the error is stored and replayed with the same status and body', async () => {
    const key = newKey();
    const before = await countPayments();
    const first = await mutate(
      server.url,
      'declinedPay',
      { paymentId: 'pay_trpc_declined', amount: 5 },
      { 'idempotency-key': key },
    );
    expect(first.status).toBe(412);
    expect(await countPayments()).toBe(before);

    const replay = await mutate(
      server.url,
      'declinedPay',
      { paymentId: 'pay_trpc_declined', amount: 5 },
      { 'idempotency-key': key },
    );
    expect(replay.status).toBe(412);
    expect(replay.body).toEqual(first.body);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(app.calls.declinedPay).toBe(1);
    expect(await countPayments()).toBe(before);
  });

  it('E8: under resume, a failure after a step keeps the step’s write (its recovery point) and rolls back the rest; the retry skips the step and completes once', async () => {
    const headers = { 'idempotency-key': newKey() };
    const before = await countPayments();
    const input = { paymentId: `steps-${newKey()}`, amount: 5 };

    const first = await mutate(server.url, 'payInSteps', input, headers);
    expect(first.status).toBe(500);
    expect(first.headers.get('idempotent-resumable')).toBe('true');
    expect(await countPayments()).toBe(before + 1); // the reservation committed with its step; the charge rolled back

    const retry = await mutate(server.url, 'payInSteps', input, headers);
    expect(retry.status).toBe(200);
    expect(retry.body.result.data).toEqual({ paymentId: input.paymentId, attempt: 2 });
    expect(await countPayments()).toBe(before + 2);

    const again = await mutate(server.url, 'payInSteps', input, headers);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(app.calls).toMatchObject({ reserve: 1, charge: 2 });
    expect(await countPayments()).toBe(before + 2);
  });

  it('F3: the usual rules hold in atomic mode: another payload with the same key is 422 and runs nothing', async () => {
    const key = newKey();
    const before = await countPayments();
    const runs = app.calls.pay;
    expect(
      (await mutate(server.url, 'pay', { paymentId: 'pay_trpc_2', amount: 1 }, { 'idempotency-key': key })).status,
    ).toBe(200);
    const other = await mutate(server.url, 'pay', { paymentId: 'pay_trpc_3', amount: 1 }, { 'idempotency-key': key });
    expect(other.status).toBe(422);
    expect(app.calls.pay).toBe(runs + 1);
    expect(await countPayments()).toBe(before + 1);
  });
});

describe('@idem/trpc atomic mode on SQLite', () => {
  it('is refused on better-sqlite3 (no atomic mode) when the middleware is created, with an [idem] error pointing to the stores that have it', async () => {
    const sqlite = await openSqliteTarget();
    try {
      await migrate(sqlite.db);
      const store = createDrizzleStore(sqlite.db);
      expect(() => idempotency({ store, principal: () => 'alice', atomic: true })).toThrow(
        new TypeError(
          '[idem] idempotency(): `atomic: true` needs a store with atomic mode (its `transaction`: AtomicMode in @idem/core/store), and this store has none: leave `atomic` off, or use a store that has it (@idem/drizzle: the drivers its README lists under Drivers).',
        ),
      );
      expect(() => idempotency({ store, principal: () => 'alice' })).not.toThrow();
    } finally {
      await sqlite.close();
    }
  });
});
