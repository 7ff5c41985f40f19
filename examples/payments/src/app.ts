import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createHTTPHandler } from '@trpc/server/adapters/standalone';
import cors from 'cors';
import {
  idempotencyCors,
  idempotencyCorsHeaders,
  renderPolicyHtml,
  requestUrlOf,
  resolveDocumentationUrl,
} from '@idem/core/http';
import type { IdempotencyEvent, IdempotencyStore } from '@idem/core';
import { createDrizzleStore, type DrizzleDatabase } from '@idem/drizzle';
import { accountOf, BadCredentialsError } from './account.ts';
import { ADMIN_TIMELINE_PATH, serveTimeline } from './admin.ts';
import { PaymentChannel, type Semantics } from './channel.ts';
import { DEFAULT_MAX_BODY_BYTES } from './config.ts';
import { createPaymentsRouter, createContext, type PaymentsStore } from './trpc.ts';
import { createPaymentsYoga } from './graphql.ts';
import { APOLLO_GRAPHQL_PATH, createPaymentsApollo } from './apollo.ts';
import { paymentsPolicy } from './policy.ts';
import { createPaymentsRest, REST_LEDGER_PATH, REST_PAYMENTS_PATH } from './rest.ts';
import { createKeyStatusRoute, KEY_STATUS_PATH, KEY_STATUS_QUERY_PATH } from './key-status.ts';

export interface PaymentsAppOptions {
  db: DrizzleDatabase;
  retentionMs: number;
  leaseMs: number;
  /** E3w: how long a duplicate waits for the outcome in progress (`IDEM_WAIT`). Defaults to 0: 409 at once. */
  waitMs?: number;
  channelDelayMs?: number;
  /** Every idem event, e.g. to log it. */
  onEvent?: (event: IdempotencyEvent) => void;
  /** Atomic mode (PostgreSQL only): the ledger row commits with the claim and the outcome. Defaults to false. */
  atomic?: boolean;
  /** Group commit in the default store (`createDrizzleStore(db, { groupCommit })`). Defaults to true. */
  groupCommit?: boolean;
  /** The idem store. Defaults to `createDrizzleStore(db, { groupCommit })`; tests wrap it to inject store faults. */
  store?: PaymentsStore;
  /** The largest request body accepted on `/trpc`, `/graphql` and `/v1/payments`, in bytes; larger ones get 413. Defaults to 64 KiB. */
  maxBodyBytes?: number;
  /**
   * Origins whose pages may call the API from a browser (CORS on `/trpc`, `/graphql`, the policy
   * and `/healthz`): `Idempotency-Key` allowed in preflight, `Idempotent-Replayed` and
   * `Retry-After` exposed. Defaults to none: no CORS headers, same-origin pages only.
   */
  corsOrigins?: readonly string[];
  /** The token that opens `/admin/timeline`. Defaults to none: the admin pages do not exist (404). */
  adminToken?: string;
  /**
   * `IDEM_SEMANTICS` of the three payment endpoints: `v1` (`onFailure: 'replay'`, Stripe v1) or
   * `v2` (`onFailure: 'resume'`, Stripe v2: a retry completes a payment that failed with a 5xx).
   * Defaults to `v1`.
   */
  semantics?: Semantics;
}

export interface PaymentsApp {
  server: Server;
  store: PaymentsStore;
  channel: PaymentChannel;
  /** Waits for outcome writes being retried (E7). */
  drain(): Promise<void>;
}

export const DOCUMENTATION_PATH = '/idempotency';

/**
 * One HTTP server: tRPC at `/trpc`, GraphQL Yoga at `/graphql`, Apollo Server at `/apollo/graphql`, `POST /v1/payments`, the published policy at
 * `/idempotency`, and `/healthz`, all made idempotent by idem over one store.
 */
export function createPaymentsApp({
  db,
  retentionMs,
  leaseMs,
  waitMs = 0,
  channelDelayMs = 0,
  onEvent,
  atomic = false,
  groupCommit = true,
  store = createDrizzleStore(db, { groupCommit }),
  maxBodyBytes = DEFAULT_MAX_BODY_BYTES,
  corsOrigins = [],
  adminToken,
  semantics = 'v1',
}: PaymentsAppOptions): PaymentsApp {
  const channel = new PaymentChannel(db, { delayMs: channelDelayMs });
  const shared = {
    store,
    channel,
    retentionMs,
    leaseMs,
    waitMs,
    atomic,
    semantics,
    ...(onEvent ? { onEvent } : {}),
  };
  const { router, engine: trpcEngine, describeEndpoint: describeTrpc } = createPaymentsRouter(shared);
  // A body over the limit is refused with 413 while it streams in, never buffered whole.
  const trpc = createHTTPHandler({ router, createContext, basePath: '/trpc/', maxBodySize: maxBodyBytes });
  // One CORS configuration: Yoga applies it on /graphql (its `cors` option), the `cors` package
  // (as with tRPC's standalone adapter) everywhere else.
  const corsConfiguration =
    corsOrigins.length > 0 ? idempotencyCors({ origin: corsOrigins, allowedHeaders: ['trpc-accept'] }) : undefined;
  const applyCors = corsConfiguration ? cors(corsConfiguration) : undefined;
  const {
    yoga,
    engine: graphqlEngine,
    describeEndpoints: describeGraphql,
  } = createPaymentsYoga({
    ...shared,
    maxBodyBytes,
    cors: corsConfiguration ?? false,
  });
  // Apollo Server at /apollo/graphql: the same schema, store and channel, @idem/apollo-server.
  const apollo = createPaymentsApollo({ ...shared, maxBodyBytes });
  // POST /v1/payments: a plain HTTP route (Hono, @idem/fetch/hono) over the same store and channel.
  const rest = createPaymentsRest({ ...shared, maxBodyBytes });
  // R4/E8: each endpoint's onFailure as its adapter publishes it (IDEM_SEMANTICS chose it).
  const onFailure = {
    trpc: describeTrpc('payments.create').onFailure ?? 'replay',
    graphql:
      describeGraphql().find((endpoint) => endpoint.operation === 'Mutation.createPayment')?.onFailure ?? 'replay',
    http: rest.describeEndpoint('POST /v1/payments').onFailure ?? 'replay',
  } as const;
  // Published at its absolute URL, as problem bodies link to it (their `type` is this URL with a fragment per problem).
  const policyFor = (req: IncomingMessage) =>
    paymentsPolicy({
      retentionMs,
      leaseMs,
      waitMs,
      onFailure,
      documentationUrl: resolveDocumentationUrl(DOCUMENTATION_PATH, requestUrlOf(req)),
    });

  const keyStatus = createKeyStatusRoute({ store, documentationPath: DOCUMENTATION_PATH });

  const route = (req: IncomingMessage, res: ServerResponse): void | Promise<void> => {
    let url: URL;
    try {
      url = new URL(req.url ?? '/', 'http://localhost');
    } catch {
      // A request target such as `http://[` (curl --request-target): answered, not thrown.
      return sendProblem(res, 400, 'Bad Request', 'The request target is not a valid URL.');
    }
    const path = url.pathname;
    if (corsConfiguration && path === '/graphql') {
      // Yoga answers its preflights and sets these on its answers; set here, they are also on
      // the answers given before Yoga (401, 500), so a page on an allowed origin can read them.
      // Vary: whether the answer allows the page depends on its Origin (Yoga adds none for one origin).
      res.setHeader('Vary', 'Origin');
      if (req.method !== 'OPTIONS') {
        const headers = idempotencyCorsHeaders(
          { method: req.method ?? 'GET', headers: nodeHeaders(req) },
          corsConfiguration,
        );
        for (const [name, value] of Object.entries(headers)) res.setHeader(name, value);
      }
    }
    // A preflight is answered here (204); other requests go on with the CORS headers set.
    if (!applyCors || path === '/graphql' || path.startsWith('/admin/')) return routeRequest(req, res, url);
    return new Promise<void>((resolve, reject) => {
      applyCors(req, res, (error?: unknown) => {
        if (error) return reject(error);
        Promise.resolve(routeRequest(req, res, url)).then(resolve, reject);
      });
      if (res.writableEnded) resolve();
    });
  };

  const routeRequest = (req: IncomingMessage, res: ServerResponse, url: URL): void | Promise<void> => {
    const path = url.pathname;
    if (path.startsWith('/trpc/') || path === '/graphql' || path === APOLLO_GRAPHQL_PATH) {
      try {
        accountOf(req.headers.authorization);
      } catch (error) {
        if (!(error instanceof BadCredentialsError)) throw error;
        res.setHeader('WWW-Authenticate', 'Bearer realm="payments"');
        return sendProblem(res, 401, 'Unauthorized', error.message);
      }
    }
    if (path === REST_PAYMENTS_PATH || path.startsWith(`${REST_PAYMENTS_PATH}/`) || path === REST_LEDGER_PATH)
      return rest.listener(req, res);
    if (path.startsWith('/trpc/')) return trpc(req, res);
    if (path === '/graphql') return yoga(req, res);
    if (path === APOLLO_GRAPHQL_PATH) return apollo.listener(req, res);
    if (path === DOCUMENTATION_PATH && (req.method === 'GET' || req.method === 'HEAD'))
      return sendPolicy(req, res, policyFor(req));
    if (path.startsWith(KEY_STATUS_PATH) || path === KEY_STATUS_QUERY_PATH) return keyStatus(req, res, url);
    if (path === '/healthz' && req.method === 'GET') return health(store, res);
    if (adminToken !== undefined && path === ADMIN_TIMELINE_PATH && req.method === 'GET')
      return serveTimeline(req, res, { store, token: adminToken, url });
    sendProblem(res, 404, 'Not Found', `No route for ${req.method} ${path}`);
  };

  // Every request gets an answer and none ends the process: a handler that throws or rejects is
  // a 500 (or, once the response has started, a closed connection).
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const failed = () => {
      if (res.headersSent) res.destroy();
      else sendProblem(res, 500, 'Internal Server Error', 'The request could not be handled.');
    };
    try {
      const handled = route(req, res);
      if (handled) handled.catch(failed);
    } catch {
      failed();
    }
  });
  return {
    server,
    store,
    channel,
    drain: () =>
      Promise.all([trpcEngine.drain(), graphqlEngine.drain(), apollo.engine.drain(), rest.engine.drain()]).then(
        () => undefined,
      ),
  };
}

/** Node request headers as `idempotencyCorsHeaders` reads them. */
function nodeHeaders(req: IncomingMessage): { get(name: string): string | null } {
  return {
    get: (name) => {
      const value = req.headers[name.toLowerCase()];
      return value === undefined ? null : Array.isArray(value) ? value.join(', ') : value;
    },
  };
}

function sendPolicy(req: IncomingMessage, res: ServerResponse, policy: ReturnType<typeof paymentsPolicy>): void {
  const accept = req.headers.accept ?? '';
  if (/application\/(problem\+)?json/i.test(accept) && !/text\/html/i.test(accept))
    send(res, 200, 'application/json', JSON.stringify(policy, null, 2));
  else send(res, 200, 'text/html; charset=utf-8', renderPolicyHtml(policy));
}

async function health(store: IdempotencyStore, res: ServerResponse): Promise<void> {
  try {
    await store.ping();
    send(res, 200, 'application/json', JSON.stringify({ status: 'ok' }));
  } catch (error) {
    res.setHeader('Retry-After', '2');
    send(
      res,
      503,
      'application/json',
      JSON.stringify({
        status: 'unavailable',
        detail: `store unreachable: ${error instanceof Error ? error.message : String(error)}`,
      }),
    );
  }
}

function sendProblem(res: ServerResponse, status: number, title: string, detail: string): void {
  send(res, status, 'application/problem+json', JSON.stringify({ type: 'about:blank', title, status, detail }));
}

function send(res: ServerResponse, status: number, type: string, body: string): void {
  res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(body) });
  res.end(body);
}
