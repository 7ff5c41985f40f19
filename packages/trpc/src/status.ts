import { TRPCError, type TRPCProcedureBuilder, type TRPCUnsetMarker } from '@trpc/server';
import {
  createKeyStatusLookup,
  parseKeyStatusQuery,
  SharedPrincipalLookupError,
  type KeyStatusDocument,
  type KeyStatusLookupOptions,
  type KeyStatusQuery,
} from '@idem/core/key-status';

/**
 * Options of {@link idempotencyStatusProcedure}: the middleware's `store`, `principal` and
 * `serializer` — pass the object you pass to `idempotency()` — and `clockToleranceMs`.
 */
export type IdempotencyStatusOptions<TContext> = KeyStatusLookupOptions<TContext>;

/** The context a procedure's resolver sees: its base context with the middlewares' additions. */
type Overwrite<TBase, TWith> = Omit<TBase, keyof TWith> & TWith;

/**
 * A ready query procedure that answers what became of one of the caller's keys, so that a client
 * past the retention reconciles instead of retrying (R2, A1). Its input is `{ key, operation }`
 * (the procedure path the key was used on, e.g. `payments.create`); its output is every
 * generation of that key under the caller's principal — state, first seen, completed, expired
 * or archived, the outcome status, and the stored outcome while it is still replayable — or
 * `null` when there is none: an unknown key and another principal's key get the same answer.
 * A malformed key or operation is refused with `BAD_REQUEST` (400, K1–K3); a caller whose principal
 * is a shared one (`sharedPrincipals`, by default `'*'`) with `FORBIDDEN` (403).
 *
 * Build it on the procedure your mutations use (the same auth middlewares), with the options
 * of their `idempotency()` middleware, so that it reads the same principal (S1):
 *
 * ```ts
 * const options = { store, principal: (ctx: Context) => ctx.user.id };
 * const router = t.router({
 *   payments: t.router({ create: authed.input(payment).use(idempotency(options)).mutation(charge) }),
 *   idempotency: t.router({ status: idempotencyStatusProcedure(authed, options) }),
 * });
 * ```
 *
 * Clients call it through `reconcile(client, key, { operation })`, or let `idempotencyLink({
 * reconcile: { path: 'idempotency.status' } })` call it when the retention stops its retries.
 *
 * @throws TypeError `[idem] …` at once when `store` or `principal` is missing.
 */
export function idempotencyStatusProcedure<TContext, TMeta, TContextOverrides, TCaller extends boolean>(
  procedure: TRPCProcedureBuilder<
    TContext,
    TMeta,
    TContextOverrides,
    TRPCUnsetMarker,
    TRPCUnsetMarker,
    TRPCUnsetMarker,
    TRPCUnsetMarker,
    TCaller
  >,
  options: IdempotencyStatusOptions<Overwrite<TContext, TContextOverrides>>,
) {
  const lookUp = createKeyStatusLookup(options);
  return procedure
    .input((input: unknown): KeyStatusQuery => parseKeyStatusQuery(input))
    .query(async ({ ctx, input }): Promise<KeyStatusDocument | null> => {
      try {
        return await lookUp(ctx as Overwrite<TContext, TContextOverrides>, input);
      } catch (error) {
        if (error instanceof SharedPrincipalLookupError)
          throw new TRPCError({ code: 'FORBIDDEN', message: error.message, cause: error });
        throw error;
      }
    });
}
