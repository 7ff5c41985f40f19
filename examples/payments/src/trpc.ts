import { initTRPC, TRPCError } from '@trpc/server';
import type { CreateHTTPContextOptions } from '@trpc/server/adapters/standalone';
import { z } from 'zod';
import {
  idempotency,
  idempotencyClaim,
  idempotencyContext,
  idempotencyErrorFormatter,
  idempotencyStatusProcedure,
} from '@idem/trpc';
import { notStarted, type IdempotencyStore, type IdempotencyEventHandler } from '@idem/core';
import type { DrizzleDatabase, DrizzleTransaction } from '@idem/drizzle';
import { accountOf, SHARED_ACCOUNTS } from './account.ts';
import {
  ChargeNotRecordedError,
  ChargeRefusedError,
  innermostMessage,
  MAX_AMOUNT,
  PaymentChannelError,
  PaymentChannelTimeoutError,
  PaymentDeclinedError,
  type PaymentChannel,
  type Semantics,
} from './channel.ts';
import { SEMANTICS } from './config.ts';

/** What a client is told of an error the server did not mean to show (item 10): its cause goes to the server's log. */
export const UNEXPECTED_ERROR_MESSAGE =
  'The request failed unexpectedly on the server, which logged the cause. If it was a payment, look it up (the ledger) before paying again with a new key.';

/**
 * The resolver's failure as the client may see it, before idem stores it (E4): tRPC errors and
 * the channel's own failure as they are; anything else (a database error carrying its SQL and
 * parameters, a bug) becomes a generic INTERNAL_SERVER_ERROR, its cause logged here. A failure
 * that gave the key back (`notStarted(ctx, error)`) is a tRPC error of its own, so it goes on as it is.
 */
function clientError(error: TRPCError, path: string): TRPCError {
  const { cause } = error;
  if (error.code !== 'INTERNAL_SERVER_ERROR') return error;
  if (cause instanceof PaymentChannelError) return error;
  console.error(`[payments] ${path} failed unexpectedly: ${innermostMessage(cause ?? error)}`);
  return new TRPCError({ code: 'INTERNAL_SERVER_ERROR', message: UNEXPECTED_ERROR_MESSAGE });
}

export function createContext(opts: CreateHTTPContextOptions) {
  return { account: accountOf(opts.req.headers.authorization), ...idempotencyContext(opts) };
}
export type Context = ReturnType<typeof createContext>;

export const paymentInput = z.object({
  amount: z.number().int().positive().max(MAX_AMOUNT, `amount must be at most ${MAX_AMOUNT}`),
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
  /** E3w: how long a duplicate waits for the outcome in progress. Defaults to 0: 409 at once. */
  waitMs?: number;
  onEvent?: IdempotencyEventHandler;
  /** Atomic mode (PostgreSQL): the ledger row commits with the claim and the outcome. Defaults to false. */
  atomic?: boolean;
  /**
   * `IDEM_SEMANTICS`: `v1` (`onFailure: 'replay'`, the default) stores and replays a failure after
   * the start; `v2` (`onFailure: 'resume'`) lets a retry with the same key complete a payment whose
   * 5xx came after the start, the payment's steps (`reserve`, `charge`) through `claim.step`.
   */
  semantics?: Semantics;
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
  waitMs = 0,
  onEvent,
  atomic = false,
  semantics = 'v1',
}: PaymentsRouterOptions) {
  // isDev: false keeps stack traces out of error responses.
  const t = initTRPC.context<Context>().create({ errorFormatter: idempotencyErrorFormatter, isDev: false });
  const options = {
    store,
    principal: (ctx: Context) => ctx.account,
    retention: retentionMs,
    lease: leaseMs,
    wait: waitMs,
    atomic,
    onFailure: SEMANTICS[semantics],
    ...(onEvent ? { onEvent } : {}),
  };
  const idempotent = idempotency(options);
  // Between idem and the resolver: what idem stores and replays is what the client may see.
  const masked = t.middleware(async ({ next, path }) => {
    const result = await next();
    if (result.ok) return result;
    throw clientError(result.error, path);
  });
  const router = t.router({
    payments: t.router({
      create: t.procedure
        .input(paymentInput)
        .use(idempotent)
        .use(masked)
        .mutation(async ({ input, ctx }) => {
          const claim = idempotencyClaim(ctx);
          // Two steps, reserve then charge, each under a key derived from ours (a re-execution
          // charges once); in atomic mode their rows are written in idem's transaction.
          try {
            return await channel.pay({ account: ctx.account, amount: input.amount, currency: input.currency }, claim, {
              steps: semantics === 'v2',
            });
          } catch (error) {
            // The channel timed out, nothing charged: 504, replayed (v1) or resumed by the retry (v2).
            if (error instanceof PaymentChannelTimeoutError)
              throw new TRPCError({ code: 'GATEWAY_TIMEOUT', message: error.message, cause: error });
            // Declined: the client's to fix, a final failure stored and replayed in both modes.
            if (error instanceof PaymentDeclinedError)
              throw new TRPCError({ code: 'PAYMENT_REQUIRED', message: error.message, cause: error });
            // Nothing was charged: give the key back (E4), so that the retry the 503 asks for charges.
            if (error instanceof ChargeNotRecordedError)
              throw notStarted(
                ctx,
                new TRPCError({ code: 'SERVICE_UNAVAILABLE', message: error.message, cause: error }),
              );
            // The database refused the payment's data: the client's to fix (400), nothing charged.
            if (error instanceof ChargeRefusedError)
              throw notStarted(ctx, new TRPCError({ code: 'BAD_REQUEST', message: error.message, cause: error }));
            throw error;
          }
        }),
      ledger: t.procedure.use(masked).query(() => channel.ledger()),
      // What the ledger holds for one of the caller's keys: reservations, charges, timeouts (as GET /v1/ledger?key=…).
      keyLedger: t.procedure
        .input(z.object({ key: z.string().min(1) }))
        .use(masked)
        .query(({ input, ctx }) => channel.keyLedger(ctx.account, input.key)),
    }),
    // What became of one of the caller's keys: `{ key, operation: 'payments.create' }` (reconcile, R2).
    idempotency: t.router({
      status: idempotencyStatusProcedure(t.procedure, { ...options, sharedPrincipals: SHARED_ACCOUNTS }),
    }),
  });
  // R4: the endpoint as the middleware publishes it (its onFailure among the rest).
  return { router, engine: idempotent.engine, describeEndpoint: idempotent.describeEndpoint };
}

export type PaymentsRouter = ReturnType<typeof createPaymentsRouter>['router'];
