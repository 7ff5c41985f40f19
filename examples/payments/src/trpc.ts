import { initTRPC } from '@trpc/server';
import type { CreateHTTPContextOptions } from '@trpc/server/adapters/standalone';
import { z } from 'zod';
import {
  idempotency,
  idempotencyClaim,
  idempotencyContext,
  idempotencyErrorFormatter,
  idempotencyStatusProcedure,
} from '@idem/trpc';
import type { IdempotencyStore, IdempotencyEventHandler } from '@idem/core';
import type { DrizzleDatabase, DrizzleTransaction } from '@idem/drizzle';
import { accountOf } from './account.ts';
import type { PaymentChannel } from './channel.ts';

export function createContext(opts: CreateHTTPContextOptions) {
  return { account: accountOf(opts.req.headers.authorization), ...idempotencyContext(opts) };
}
export type Context = ReturnType<typeof createContext>;

export const paymentInput = z.object({
  amount: z.number().int().positive(),
  currency: z.string().regex(/^[A-Z]{3}$/, 'currency must be 3 uppercase letters'),
  idempotencyKey: z.string().optional(),
});

/** The example's store: its atomic mode hands the resolvers a Drizzle transaction (`claim.tx`). */
export type PaymentsStore = IdempotencyStore<DrizzleTransaction<DrizzleDatabase>>;

export interface PaymentsRouterOptions {
  store: PaymentsStore;
  channel: PaymentChannel;
  retentionMs: number;
  leaseMs: number;
  onEvent?: IdempotencyEventHandler;
  /** Atomic mode (PostgreSQL): the ledger row commits with the claim and the outcome. Defaults to false. */
  atomic?: boolean;
}

/**
 * tRPC, plain JSON: `payments.create` (idempotent mutation), `payments.ledger` (query), and
 * `idempotency.status` (query: what became of a key).
 */
export function createPaymentsRouter({
  store,
  channel,
  retentionMs,
  leaseMs,
  onEvent,
  atomic = false,
}: PaymentsRouterOptions) {
  // isDev: false keeps stack traces out of error responses.
  const t = initTRPC.context<Context>().create({ errorFormatter: idempotencyErrorFormatter, isDev: false });
  const options = {
    store,
    principal: (ctx: Context) => ctx.account,
    retention: retentionMs,
    lease: leaseMs,
    atomic,
    ...(onEvent ? { onEvent } : {}),
  };
  const idempotent = idempotency(options);
  const router = t.router({
    payments: t.router({
      create: t.procedure
        .input(paymentInput)
        .use(idempotent)
        .mutation(({ input, ctx }) => {
          const claim = idempotencyClaim(ctx);
          // The channel deduplicates by a key derived from ours (a re-execution after a lease
          // takeover charges once); in atomic mode its ledger row is written in idem's transaction.
          return channel.charge(
            {
              account: ctx.account,
              amount: input.amount,
              currency: input.currency,
              downstreamKey: claim?.deriveKey('channel'),
            },
            claim?.tx,
          );
        }),
      ledger: t.procedure.query(() => channel.ledger()),
    }),
    // What became of one of the caller's keys: `{ key, operation: 'payments.create' }` (reconcile, R2).
    idempotency: t.router({ status: idempotencyStatusProcedure(t.procedure, options) }),
  });
  return { router, engine: idempotent.engine };
}

export type PaymentsRouter = ReturnType<typeof createPaymentsRouter>['router'];
