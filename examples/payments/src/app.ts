import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createHTTPHandler } from '@trpc/server/adapters/standalone';
import { renderPolicyHtml, requestUrlOf, resolveDocumentationUrl, type IdempotencyEvent, type IdempotencyStore } from '@idem/core';
import { createDrizzleStore, type DrizzleDatabase } from '@idem/drizzle';
import { PaymentChannel } from './channel.ts';
import { createPaymentsRouter, createContext } from './trpc.ts';
import { createPaymentsYoga } from './graphql.ts';
import { paymentsPolicy } from './policy.ts';

export interface PaymentsAppOptions {
  db: DrizzleDatabase;
  retentionMs: number;
  leaseMs: number;
  channelDelayMs?: number;
  /** Every idem event, e.g. to log it. */
  onEvent?: (event: IdempotencyEvent) => void;
  /** Atomic mode (PostgreSQL only): the ledger row commits with the claim and the outcome. Defaults to false. */
  atomic?: boolean;
  /** The idem store. Defaults to `createDrizzleStore(db)`; tests wrap it to inject store faults. */
  store?: IdempotencyStore;
}

export interface PaymentsApp {
  server: Server;
  store: IdempotencyStore;
  channel: PaymentChannel;
  /** Waits for outcome writes being retried (E7). */
  drain(): Promise<void>;
}

export const DOCUMENTATION_PATH = '/idempotency';

/**
 * One HTTP server: tRPC at `/trpc`, GraphQL Yoga at `/graphql`, the published policy at
 * `/idempotency`, and `/healthz`, all made idempotent by idem over one store.
 */
export function createPaymentsApp({ db, retentionMs, leaseMs, channelDelayMs = 0, onEvent, atomic = false, store = createDrizzleStore(db) }: PaymentsAppOptions): PaymentsApp {
  const channel = new PaymentChannel(db, { delayMs: channelDelayMs });
  const shared = { store, channel, retentionMs, leaseMs, atomic, ...(onEvent ? { onEvent } : {}) };
  const { router, engine: trpcEngine } = createPaymentsRouter(shared);
  const trpc = createHTTPHandler({ router, createContext, basePath: '/trpc/' });
  const { yoga, engine: graphqlEngine } = createPaymentsYoga(shared);
  // Published at its absolute URL, as problem bodies link to it (their `type` is this URL with a fragment per problem).
  const policyFor = (req: IncomingMessage) => paymentsPolicy({ retentionMs, leaseMs, documentationUrl: resolveDocumentationUrl(DOCUMENTATION_PATH, requestUrlOf(req)) });

  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const path = new URL(req.url ?? '/', 'http://localhost').pathname;
    if (path.startsWith('/trpc/')) return void trpc(req, res);
    if (path === '/graphql') return void yoga(req, res);
    if (path === DOCUMENTATION_PATH && (req.method === 'GET' || req.method === 'HEAD')) return sendPolicy(req, res, policyFor(req));
    if (path === '/healthz' && req.method === 'GET') return void health(store, res);
    send(res, 404, 'application/problem+json', JSON.stringify({ type: 'about:blank', title: 'Not Found', status: 404, detail: `No route for ${req.method} ${path}` }));
  });
  return { server, store, channel, drain: () => Promise.all([trpcEngine.drain(), graphqlEngine.drain()]).then(() => undefined) };
}

function sendPolicy(req: IncomingMessage, res: ServerResponse, policy: ReturnType<typeof paymentsPolicy>): void {
  const accept = req.headers.accept ?? '';
  if (/application\/(problem\+)?json/i.test(accept) && !/text\/html/i.test(accept)) send(res, 200, 'application/json', JSON.stringify(policy, null, 2));
  else send(res, 200, 'text/html; charset=utf-8', renderPolicyHtml(policy));
}

async function health(store: IdempotencyStore, res: ServerResponse): Promise<void> {
  try {
    await store.ping();
    send(res, 200, 'application/json', JSON.stringify({ status: 'ok' }));
  } catch (error) {
    res.setHeader('Retry-After', '2');
    send(res, 503, 'application/json', JSON.stringify({ status: 'unavailable', detail: `store unreachable: ${error instanceof Error ? error.message : String(error)}` }));
  }
}

function send(res: ServerResponse, status: number, type: string, body: string): void {
  res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(body) });
  res.end(body);
}
