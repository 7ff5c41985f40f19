/**
 * Real HTTP for the black-box tests: tRPC servers on 127.0.0.1 (standalone, fetch, Express
 * adapters), `@trpc/client` clients that keep every `Response`, and raw requests.
 */
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';
import { createHTTPServer, type CreateHTTPContextOptions } from '@trpc/server/adapters/standalone';
import { createExpressMiddleware } from '@trpc/server/adapters/express';
import { fetchRequestHandler } from '@trpc/server/adapters/fetch';
import type { AnyTRPCRouter } from '@trpc/server';
import { createTRPCClient, httpBatchLink, httpBatchStreamLink, httpLink, type TRPCLink } from '@trpc/client';
import { idempotencyContext } from '../src/index.ts';
import type { AppContext } from './app.ts';

export interface RunningServer {
  url: string;
  close(): Promise<void>;
}

function nodeContext(opts: { req: IncomingMessage } & Parameters<typeof idempotencyContext>[0]): AppContext {
  return {
    user: header(opts.req.headers['x-user']) ?? 'alice',
    deny: opts.req.headers['x-deny'] === '1',
    ...idempotencyContext(opts),
  };
}

function header(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

function listen(server: Server): Promise<RunningServer> {
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

/** The standalone adapter; `createContext` defaults to the test context with `idempotencyContext`. */
export function startStandalone(
  router: AnyTRPCRouter,
  createContext: (opts: CreateHTTPContextOptions) => object = nodeContext,
): Promise<RunningServer> {
  return listen(createHTTPServer({ router, createContext }));
}

/** The Express adapter, mounted as Express would: `req.path` is the path below the mount point. */
export function startExpress(router: AnyTRPCRouter): Promise<RunningServer> {
  const handle = createExpressMiddleware({ router, createContext: nodeContext });
  return listen(
    createServer((req, res) => {
      Object.assign(req, { path: new URL(req.url ?? '/', 'http://localhost').pathname });
      handle(req as never, res as never, () => {});
    }),
  );
}

/** The fetch adapter, called with Fetch API `Request`s (no socket): a `fetch` for clients. */
export function fetchAdapter(router: AnyTRPCRouter): typeof fetch {
  return async (input, init) => {
    const req = new Request(input, init);
    return fetchRequestHandler({
      endpoint: '/trpc',
      req,
      router,
      createContext: (opts) => ({
        user: opts.req.headers.get('x-user') ?? 'alice',
        deny: opts.req.headers.get('x-deny') === '1',
        ...idempotencyContext(opts),
      }),
    });
  };
}

export const newKey = () => `key-${randomUUID()}`;

export interface ClientOptions {
  link?: 'http' | 'batch' | 'stream';
  key?: string;
  user?: string;
  headers?: Record<string, string>;
  transformer?: any;
  fetch?: typeof fetch;
}

/** A typed client that records every HTTP response it got. */
export function clientFor<TRouter extends AnyTRPCRouter>(url: string, options: ClientOptions = {}) {
  const responses: Response[] = [];
  const baseFetch = options.fetch ?? fetch;
  const recordingFetch = async (input: RequestInfo | URL, init?: RequestInit) => {
    const response = await baseFetch(input, init);
    responses.push(response);
    return response;
  };
  const headers = () => ({
    ...(options.key === undefined ? {} : { 'idempotency-key': options.key }),
    ...(options.user === undefined ? {} : { 'x-user': options.user }),
    ...options.headers,
  });
  const linkOptions = { url, headers, fetch: recordingFetch, transformer: options.transformer } as any;
  const link: TRPCLink<TRouter> =
    options.link === 'batch'
      ? httpBatchLink(linkOptions)
      : options.link === 'stream'
        ? httpBatchStreamLink(linkOptions)
        : httpLink(linkOptions);
  return {
    trpc: createTRPCClient<TRouter>({ links: [link] }),
    responses,
    /** The last HTTP response's headers. */
    lastHeaders: () => responses.at(-1)!.headers,
  };
}

export interface RawResponse {
  status: number;
  headers: Headers;
  body: any;
}

/** POSTs one mutation the way `httpLink` does (no transformer), to read status and headers. */
export async function mutate(
  url: string,
  path: string,
  input: unknown,
  headers: Record<string, string> = {},
): Promise<RawResponse> {
  const response = await fetch(`${url}/${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(input),
  });
  return { status: response.status, headers: response.headers, body: await response.json() };
}
