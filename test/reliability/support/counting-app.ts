/**
 * A minimal app built from the adapters as a user would build it: tRPC `orders.create`
 * (`idempotency()`, key from the header or the `idempotencyKey` input field), GraphQL
 * `createOrder` (`useYogaIdempotency`, header or argument key) and plain HTTP `POST /orders`
 * (Hono with `@idem/fetch/hono`, header or JSON body field key), all over one store. Its
 * resolver counts executions in memory, echoes the key it ran under, and can be held at a
 * gate, so a test decides exactly when a handler is "running". Served in process (Fetch
 * handlers) or over loopback HTTP (both adapters on one Node server, as in the example).
 */
import { createServer, type Server } from 'node:http';
import { TRPCError, initTRPC } from '@trpc/server';
import { createHTTPHandler } from '@trpc/server/adapters/standalone';
import { fetchRequestHandler } from '@trpc/server/adapters/fetch';
import { createSchema, createYoga } from 'graphql-yoga';
import { GraphQLError } from 'graphql';
import { z } from 'zod';
import { formatScope, idempotencyClaim, type Duration, type IdempotencyEvent, type IdempotencyStore } from '@idem/core';
import { idempotency, idempotencyContext, idempotencyErrorFormatter, type IdempotencyContext } from '@idem/trpc';
import { idempotentDirectiveTypeDefs, useYogaIdempotency } from '@idem/envelop';
import { Hono } from 'hono';
import { getRequestListener } from '@hono/node-server';
import { notStarted } from '@idem/fetch';
import { idempotency as honoIdempotency } from '@idem/fetch/hono';
import { postJson, overLoopback, pollUntil, IDEMPOTENCY_KEY, type Answer, type FetchHandler } from './http.ts';

export interface CountingAppOptions {
  store: IdempotencyStore;
  /** E6 lease of both endpoints. Defaults to the engine's (30 s). */
  lease?: Duration;
  /** The engine's `maxStoredBytes`. Defaults to the engine's (1 MiB). */
  maxStoredBytes?: number;
}

/** What the resolver returns: which execution this was, under which key, and the input echoed back. */
export interface Order {
  execution: number;
  key: string | null;
  amount: number;
  note: string | null;
  blob: string;
}

export interface OrderInput {
  amount: number;
  /** Echoed back as is (unicode, secrets). */
  note?: string;
  /** The output carries `'x'.repeat(size)` (large outcomes). */
  size?: number;
  /** The resolver throws (a stored error outcome, E4): a 412 whose message is the note plus the blob. */
  fail?: boolean;
}

/** Holds resolvers while closed; counts who is waiting. */
export class Gate {
  #open = true;
  #release: Array<() => void> = [];
  #watchers: Array<{ count: number; resolve: () => void }> = [];
  waiting = 0;

  close(): void {
    this.#open = false;
  }

  open(): void {
    this.#open = true;
    const release = this.#release;
    this.#release = [];
    for (const resolve of release) resolve();
  }

  async pass(): Promise<void> {
    if (this.#open) return;
    this.waiting++;
    for (const watcher of this.#watchers.filter((w) => this.waiting >= w.count)) watcher.resolve();
    await new Promise<void>((resolve) => this.#release.push(resolve));
    this.waiting--;
  }

  /** Resolves once `count` resolvers wait at the gate (rejects after `timeoutMs`). */
  whenWaiting(count = 1, timeoutMs = 10_000): Promise<void> {
    if (this.waiting >= count) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`[reliability] no ${count} resolver(s) at the gate within ${timeoutMs} ms`)),
        timeoutMs,
      );
      this.#watchers.push({
        count,
        resolve: () => {
          clearTimeout(timer);
          resolve();
        },
      });
    });
  }
}

/** `Authorization: Bearer <account>`, else `public` (as the example). */
export function accountOf(authorization: string | null | undefined): string {
  return /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '')?.[1] ?? 'public';
}

type Context = { account: string } & IdempotencyContext;

const orderInput = z.object({
  amount: z.number().int().positive(),
  note: z.string().optional(),
  size: z.number().int().min(0).max(1_000_000).optional(),
  fail: z.boolean().optional(),
  idempotencyKey: z.string().optional(),
});

const typeDefs = /* GraphQL */ `
  ${idempotentDirectiveTypeDefs}
  input OrderInput { amount: Int!, note: String, size: Int, fail: Boolean }
  type Order { execution: Int!, key: String, amount: Int!, note: String, blob: String! }
  type Query { executions: Int! }
  type Mutation { createOrder(input: OrderInput!, idempotencyKey: String): Order }
`;

export interface CountingApp {
  /** Resolver runs so far, both adapters. */
  readonly executions: number;
  readonly gate: Gate;
  /** Every engine event of both adapters, in order. */
  readonly events: IdempotencyEvent[];
  readonly trpcFetch: FetchHandler;
  readonly yogaFetch: FetchHandler;
  /** `POST /orders` (Hono, `@idem/fetch/hono`). */
  readonly httpFetch: FetchHandler;
  /** The first event (logged or to come) that matches; rejects after `timeoutMs`. */
  waitForEvent(match: (event: IdempotencyEvent) => boolean, timeoutMs?: number): Promise<IdempotencyEvent>;
  /** Waits for background outcome writes (E7) of both engines. */
  drain(): Promise<void>;
  /** The adapters on one Node server at 127.0.0.1 (`/trpc/*`, `/graphql`, `/orders`). */
  listen(): Promise<{ url: string; close(): Promise<void> }>;
}

export function createCountingApp({ store, lease, maxStoredBytes }: CountingAppOptions): CountingApp {
  let executions = 0;
  const gate = new Gate();
  const events: IdempotencyEvent[] = [];
  const onEvent = (event: IdempotencyEvent) => void events.push(event);
  const engineOptions = {
    store,
    onEvent,
    ...(lease === undefined ? {} : { lease }),
    ...(maxStoredBytes === undefined ? {} : { maxStoredBytes }),
  };

  const run = async (context: unknown, input: OrderInput): Promise<Order> => {
    const execution = ++executions;
    await gate.pass();
    const blob = 'x'.repeat(input.size ?? 0);
    if (input.fail) throw new RefusedOrder(`${input.note ?? ''}${blob}`);
    return {
      execution,
      key: idempotencyClaim(context)?.key ?? null,
      amount: input.amount,
      note: input.note ?? null,
      blob,
    };
  };

  const t = initTRPC.context<Context>().create({ errorFormatter: idempotencyErrorFormatter, isDev: false });
  const idempotent = idempotency<Context>({ ...engineOptions, principal: (ctx) => ctx.account });
  const router = t.router({
    orders: t.router({
      create: t.procedure
        .input(orderInput)
        .use(idempotent)
        .mutation(async ({ ctx, input }) => {
          try {
            return await run(ctx, input);
          } catch (error) {
            if (error instanceof RefusedOrder)
              throw new TRPCError({ code: 'PRECONDITION_FAILED', message: error.message });
            throw error;
          }
        }),
    }),
  });

  const yogaIdempotency = useYogaIdempotency<{ request: Request }>({
    ...engineOptions,
    principal: ({ request }) => accountOf(request.headers.get('authorization')),
    required: true,
  });
  const yoga = createYoga<{ request: Request }>({
    graphqlEndpoint: '/graphql',
    logging: false,
    maskedErrors: false,
    schema: createSchema<{ request: Request }>({
      typeDefs,
      resolvers: {
        Query: { executions: () => executions },
        Mutation: {
          createOrder: async (_: unknown, args: { input: OrderInput }, context: unknown) => {
            try {
              return await run(context, args.input);
            } catch (error) {
              if (error instanceof RefusedOrder)
                throw new GraphQLError(error.message, {
                  extensions: { code: 'PRECONDITION_FAILED', http: { status: 412 } },
                });
              throw error;
            }
          },
        },
      },
    }),
    plugins: [yogaIdempotency],
  });

  const httpIdempotency = honoIdempotency({
    ...engineOptions,
    principal: (c) => accountOf(c.req.header('authorization')),
  });
  const hono = new Hono();
  hono.post('/orders', httpIdempotency, async (c) => {
    const parsed = orderInput.safeParse(await c.req.json().catch(() => undefined));
    if (!parsed.success) return notStarted(c.json({ error: parsed.error.message }, 400));
    try {
      return c.json(await run(c, parsed.data));
    } catch (error) {
      if (error instanceof RefusedOrder) return c.json({ error: error.message }, 412);
      throw error;
    }
  });
  const honoNode = getRequestListener(hono.fetch, { overrideGlobalObjects: false });

  const trpcNode = createHTTPHandler({
    router,
    basePath: '/trpc/',
    createContext: (opts) => ({ account: accountOf(opts.req.headers.authorization), ...idempotencyContext(opts) }),
  });
  const trpcFetch: FetchHandler = (req) =>
    fetchRequestHandler({
      endpoint: '/trpc',
      req,
      router,
      createContext: (opts) => ({
        account: accountOf(opts.req.headers.get('authorization')),
        ...idempotencyContext(opts),
      }),
    });

  return {
    get executions() {
      return executions;
    },
    gate,
    events,
    trpcFetch,
    yogaFetch: async (request) => yoga.fetch(request),
    httpFetch: async (request) => hono.fetch(request),
    waitForEvent: (match, timeoutMs = 10_000) =>
      pollUntil(async () => events.find(match), { intervalMs: 20, timeoutMs }).catch(() => {
        throw new Error(
          `[reliability] no matching event within ${timeoutMs} ms; saw ${JSON.stringify(events.map((event) => event.type))}`,
        );
      }),
    drain: () =>
      Promise.all([idempotent.engine.drain(), yogaIdempotency.engine.drain(), httpIdempotency.engine.drain()]).then(
        () => undefined,
      ),
    async listen() {
      const server: Server = createServer((req, res) => {
        if ((req.url ?? '').startsWith('/trpc/')) return void trpcNode(req, res);
        if ((req.url ?? '').startsWith('/orders')) return void honoNode(req, res);
        return void yoga(req, res);
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      const { port } = server.address() as { port: number };
      return {
        url: `http://127.0.0.1:${port}`,
        close: () =>
          new Promise<void>((resolve) => {
            server.closeAllConnections();
            server.close(() => resolve());
          }),
      };
    },
  };
}

class RefusedOrder extends Error {}

export interface OrderCall {
  key?: string;
  /** Header (default), or the input field / argument. */
  keyIn?: 'header' | 'input';
  /** Extra header lines, e.g. a repeated `Idempotency-Key`. */
  headers?: Array<[string, string]>;
  account?: string;
}

/** One adapter of the counting app, as the scenarios drive it. */
export interface OrderEndpoint {
  name: 'tRPC' | 'GraphQL' | 'HTTP';
  /** In process (`fetchRequestHandler` / `yoga.fetch`). */
  handler(app: CountingApp): FetchHandler;
  /** `baseUrl` is `http://yoga` style for in-process handlers, the server's URL over loopback. */
  create(handler: FetchHandler, baseUrl: string, input: OrderInput, call?: OrderCall): Promise<Answer>;
  /** The scope a key sent as `keyIn` by `account` is stored under (S1). */
  scope(account: string, keyIn?: 'header' | 'input'): string;
  /** The order in a successful answer. */
  order(answer: Answer): Order | undefined;
  /** The error message of a failed answer. */
  errorMessage(answer: Answer): string | undefined;
  /** The idempotency problem code of a refused answer (`idempotency_key_invalid`, …). */
  problemCode(answer: Answer): string | undefined;
}

function callHeaders({ key, keyIn = 'header', headers = [], account }: OrderCall): Array<[string, string]> {
  const all: Array<[string, string]> = [...headers];
  if (key !== undefined && keyIn === 'header') all.push([IDEMPOTENCY_KEY, key]);
  if (account !== undefined) all.push(['authorization', `Bearer ${account}`]);
  return all;
}

export const trpcOrders: OrderEndpoint = {
  name: 'tRPC',
  handler: (app) => app.trpcFetch,
  create(handler, baseUrl, input, call = {}) {
    const body = call.key !== undefined && call.keyIn === 'input' ? { ...input, idempotencyKey: call.key } : input;
    return postJson(handler, `${baseUrl}/trpc/orders.create`, body, callHeaders(call));
  },
  scope: (account) => formatScope('orders.create', account),
  order: (answer) => answer.body?.result?.data,
  errorMessage: (answer) => answer.body?.error?.message,
  problemCode: (answer) => answer.body?.error?.data?.idempotency?.code,
};

const CREATE_ORDER = /* GraphQL */ `
  mutation Order($input: OrderInput!, $key: String) {
    createOrder(input: $input, idempotencyKey: $key) { execution key amount note blob }
  }
`;

export const graphqlOrders: OrderEndpoint = {
  name: 'GraphQL',
  handler: (app) => app.yogaFetch,
  create(handler, baseUrl, input, call = {}) {
    const key = call.key !== undefined && call.keyIn === 'input' ? call.key : null;
    return postJson(
      handler,
      `${baseUrl}/graphql`,
      { query: CREATE_ORDER, variables: { input, key } },
      callHeaders(call),
    );
  },
  scope: (account, keyIn = 'header') =>
    formatScope(keyIn === 'header' ? 'mutation:createOrder' : 'Mutation.createOrder', account),
  order: (answer) => answer.body?.data?.createOrder ?? undefined,
  errorMessage: (answer) => answer.body?.errors?.[0]?.message,
  problemCode: (answer) => answer.body?.errors?.[0]?.extensions?.idempotency?.code,
};

/** `POST /orders`: the order is the whole response body, a refusal a problem+json body. */
export const httpOrders: OrderEndpoint = {
  name: 'HTTP',
  handler: (app) => app.httpFetch,
  create(handler, baseUrl, input, call = {}) {
    const body = call.key !== undefined && call.keyIn === 'input' ? { ...input, idempotencyKey: call.key } : input;
    return postJson(handler, `${baseUrl}/orders`, body, callHeaders(call));
  },
  scope: (account) => formatScope('POST /orders', account),
  order: (answer) => (answer.status === 200 ? answer.body : undefined),
  errorMessage: (answer) => answer.body?.error,
  problemCode: (answer) => answer.body?.code,
};

export const ORDER_ENDPOINTS = [trpcOrders, graphqlOrders] as const;

/** The base URL of in-process handlers (never resolved: the request goes straight to the handler). */
export const IN_PROCESS = 'http://in-process';

export { overLoopback };
