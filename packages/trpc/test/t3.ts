/**
 * A server laid out as create-t3-app generates it (App Router): `createTRPCContext({ headers })`,
 * superjson, t3's errorFormatter with its zodError, and the route handler's `fetchRequestHandler`
 * at `/api/trpc` — plus idem's additions: `...idempotencyContext(opts)` in the route handler and
 * `idempotency` / `idempotentReplayed` in the error formatter. Served over real HTTP on
 * 127.0.0.1 the way Next.js serves a route handler: a Fetch `Request` in, a streamed `Response` out.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import { initTRPC, TRPCError } from '@trpc/server';
import { fetchRequestHandler } from '@trpc/server/adapters/fetch';
import { incomingMessageToRequest } from '@trpc/server/adapters/node-http';
import superjson from 'superjson';
import { z, ZodError } from 'zod';
import { idempotencyCors, idempotencyCorsHeaders } from '@idem/core/http';
import { MemoryStore } from '@idem/core';
import {
  idempotency,
  idempotencyContext,
  idempotencyErrorData,
  isReplayedError,
  type IdempotencyContext,
} from '../src/index.ts';
import type { RunningServer } from './http.ts';

function deferred() {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

/** The origin `handlerWithCors` allows. */
export const SHOP_ORIGIN = 'http://shop.localhost:3001';

export function createT3App() {
  const store = new MemoryStore();
  const calls = { create: 0, slow: 0, taken: 0, createByHeader: 0 };
  let hold: { started: ReturnType<typeof deferred>; gate: ReturnType<typeof deferred> } | undefined;

  // src/server/api/trpc.ts: t3's createTRPCContext takes `{ headers }`; idem's fields ride along.
  const createTRPCContext = async (opts: { headers: Headers } & Partial<IdempotencyContext>) => ({
    session: { user: opts.headers.get('x-user') ?? 'alice' },
    ...opts,
  });
  type Context = Awaited<ReturnType<typeof createTRPCContext>>;
  const t = initTRPC.context<Context>().create({
    transformer: superjson,
    isDev: false,
    errorFormatter: ({ shape, error }) => ({
      ...shape,
      data: {
        ...shape.data,
        zodError: error.cause instanceof ZodError ? z.flattenError(error.cause) : null,
        idempotency: idempotencyErrorData(error),
        idempotentReplayed: isReplayedError(error) || undefined,
      },
    }),
  });
  const principal = (ctx: Context) => ctx.session.user;
  // superjson as the serializer too, so a replayed Date is a Date, as the first answer's was.
  const byInput = idempotency({ store, principal, key: { header: false }, serializer: superjson });
  const byHeader = idempotency({ store, principal, serializer: superjson });
  const payment = z.object({ amount: z.number().int().positive(), idempotencyKey: z.string().optional() });
  let sequence = 0;

  const appRouter = t.router({
    payment: t.router({
      create: t.procedure
        .input(payment)
        .use(byInput)
        .mutation(({ input }) => ({
          id: `pay_${++calls.create}_${++sequence}`,
          amount: input.amount,
          at: new Date(0),
        })),
      slow: t.procedure
        .input(payment)
        .use(byInput)
        .mutation(async ({ input }) => {
          const current = hold;
          calls.slow += 1;
          current?.started.resolve();
          await current?.gate.promise;
          return { id: `pay_slow_${++sequence}`, amount: input.amount };
        }),
      taken: t.procedure
        .input(payment)
        .use(byInput)
        .mutation((): never => {
          calls.taken += 1;
          throw new TRPCError({ code: 'CONFLICT', message: 'that order was already paid' });
        }),
      createByHeader: t.procedure
        .input(payment)
        .use(byHeader)
        .mutation(({ input }) => ({ id: `pay_h_${++calls.createByHeader}_${++sequence}`, amount: input.amount })),
      count: t.procedure.query(() => sequence),
    }),
  });

  // app/api/trpc/[trpc]/route.ts
  const handler = (req: Request) =>
    fetchRequestHandler({
      endpoint: '/api/trpc',
      req,
      router: appRouter,
      createContext: (opts) => createTRPCContext({ headers: req.headers, ...idempotencyContext(opts) }),
    });

  // The same route handler, serving another origin (CORS): a preflight answers OPTIONS, and
  // every response gets the allow-origin and exposed headers.
  const cors = idempotencyCors({ origin: SHOP_ORIGIN, allowedHeaders: ['trpc-accept', 'x-trpc-source'] });
  const handlerWithCors = async (req: Request) => {
    if (req.method === 'OPTIONS')
      return new Response(null, { status: 204, headers: idempotencyCorsHeaders(req, cors) });
    const response = await handler(req);
    for (const [name, value] of Object.entries(idempotencyCorsHeaders(req, cors))) response.headers.set(name, value);
    return response;
  };

  return {
    appRouter,
    handler,
    handlerWithCors,
    calls,
    /** Holds `payment.slow` resolvers until `release()`; `started` resolves when one runs. */
    hold() {
      const current = { started: deferred(), gate: deferred() };
      hold = current;
      return { started: current.started.promise, release: current.gate.resolve };
    },
  };
}

export type T3Router = ReturnType<typeof createT3App>['appRouter'];

/** Serves a Fetch API handler on 127.0.0.1, streaming its response body as it comes. */
export function serveFetchHandler(handler: (req: Request) => Promise<Response>): Promise<RunningServer> {
  const server = createServer(async (req, res) => {
    const response = await handler(incomingMessageToRequest(req, res, { maxBodySize: null }));
    res.writeHead(response.status, [...response.headers].flat());
    if (response.body) Readable.fromWeb(response.body as never).pipe(res);
    else res.end();
  });
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      resolve({
        url: `http://127.0.0.1:${port}`,
        close: () =>
          new Promise<void>((done) => {
            server.closeAllConnections();
            server.close(() => done());
          }),
      });
    });
  });
}
