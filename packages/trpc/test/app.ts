/**
 * The router the black-box tests call over HTTP: every procedure counts its resolver runs.
 */
import { initTRPC, TRPCError } from '@trpc/server';
import { z } from 'zod';
import superjson from 'superjson';
import type { IdempotencyStore } from '@idem/core';
import { idempotency, notStarted, idempotencyErrorFormatter, type IdempotencyContext } from '../src/index.ts';

export interface AppContext extends IdempotencyContext {
  /** The caller, from the `x-user` header (S1 principal). */
  user: string;
  /** `x-deny: 1` makes the auth middleware placed before `idempotent` refuse the call. */
  deny: boolean;
}

function deferred() {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

export function createTestApp(store: IdempotencyStore) {
  const calls: Record<string, number> = {};
  const bump = (name: string) => (calls[name] = (calls[name] ?? 0) + 1);
  let hold: { started: ReturnType<typeof deferred>; gate: ReturnType<typeof deferred> } | undefined;
  const state = { rateLimited: true };

  // isDev off: the error bodies of a first call and of its replay can be compared whole.
  const t = initTRPC.context<AppContext>().create({ errorFormatter: idempotencyErrorFormatter, isDev: false });
  const principal = (ctx: AppContext) => ctx.user;
  const idempotent = idempotency({ store, principal });
  const inputKeyed = idempotency({ store, principal, key: { header: false } });
  const eitherKeyed = idempotency({ store, principal, key: { header: true, field: 'idempotencyKey' } });
  const optional = idempotency({ store, principal, required: false });

  const authed = t.procedure.use(({ ctx, next }) => {
    if (ctx.deny) throw new TRPCError({ code: 'UNAUTHORIZED', message: 'who are you?' });
    return next();
  });
  // Lets a streamed response send its headers before the middleware runs.
  const late = t.procedure.use(async ({ next }) => {
    await new Promise((resolve) => setTimeout(resolve, 50));
    return next();
  });
  const order = z.object({ amount: z.number().int().positive(), note: z.string().optional() });
  const keyedOrder = order.extend({ idempotencyKey: z.string().optional() });
  let sequence = 0;
  const place = (name: string, amount: number) => ({ orderId: `ord_${bump(name)}_${++sequence}`, amount });

  const router = t.router({
    createOrder: authed
      .input(order)
      .use(idempotent)
      .mutation(({ input }) => place('createOrder', input.amount)),
    createRefund: authed
      .input(order)
      .use(idempotent)
      .mutation(({ input }) => place('createRefund', input.amount)),
    slowOrder: t.procedure
      .input(order)
      .use(idempotent)
      .mutation(async ({ input }) => {
        const current = hold;
        bump('slowOrder');
        current?.started.resolve();
        await current?.gate.promise;
        return { orderId: `ord_slow_${++sequence}`, amount: input.amount };
      }),
    lateOrder: late
      .input(order)
      .use(idempotent)
      .mutation(({ input }) => place('lateOrder', input.amount)),
    failingOrder: t.procedure
      .input(order)
      .use(idempotent)
      .mutation((): never => {
        bump('failingOrder');
        throw new Error('payment channel exploded');
      }),
    refusedOrder: t.procedure
      .input(order)
      .use(idempotent)
      .mutation((): never => {
        bump('refusedOrder');
        throw new TRPCError({ code: 'PRECONDITION_FAILED', message: 'card declined' });
      }),
    rateLimitedOrder: t.procedure
      .input(order)
      .use(idempotent)
      .mutation(({ input, ctx }) => {
        if (state.rateLimited) {
          bump('rateLimitedOrder.refused');
          throw notStarted(ctx, new TRPCError({ code: 'TOO_MANY_REQUESTS', message: 'slow down' }));
        }
        return place('rateLimitedOrder', input.amount);
      }),
    keyedOrder: t.procedure
      .input(keyedOrder)
      .use(inputKeyed)
      .mutation(({ input }) => place('keyedOrder', input.amount)),
    eitherOrder: t.procedure
      .input(keyedOrder)
      .use(eitherKeyed)
      .mutation(({ input }) => place('eitherOrder', input.amount)),
    optionalOrder: t.procedure
      .input(order)
      .use(optional)
      .mutation(({ input }) => place('optionalOrder', input.amount)),
    orderCount: t.procedure.use(idempotent).query(() => {
      bump('orderCount');
      return sequence;
    }),
  });

  return {
    router,
    calls,
    state,
    resetCalls() {
      for (const name of Object.keys(calls)) delete calls[name];
      state.rateLimited = true;
    },
    /** Holds `slowOrder` resolvers until `release()`; `started` resolves when the first one runs. */
    holdSlowOrders() {
      const current = { started: deferred(), gate: deferred() };
      hold = current;
      return {
        started: current.started.promise,
        release() {
          current.gate.resolve();
          hold = undefined;
        },
      };
    },
  };
}

export type AppRouter = ReturnType<typeof createTestApp>['router'];

/** A router with the superjson transformer and serializer: Date and Map outputs. */
export function createSuperjsonApp(store: IdempotencyStore) {
  const calls = { schedule: 0 };
  const t = initTRPC
    .context<AppContext>()
    .create({ transformer: superjson, errorFormatter: idempotencyErrorFormatter });
  const idempotent = idempotency({ store, principal: (ctx: AppContext) => ctx.user, serializer: superjson });
  const router = t.router({
    schedule: t.procedure
      .input(z.object({ at: z.date() }))
      .use(idempotent)
      .mutation(({ input }) => {
        calls.schedule += 1;
        return { at: input.at, slots: new Map([['morning', calls.schedule]]), scheduledAt: new Date() };
      }),
  });
  return { router, calls };
}

export type SuperjsonRouter = ReturnType<typeof createSuperjsonApp>['router'];
