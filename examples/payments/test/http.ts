/**
 * What the example's black-box tests share: the example app listening on 127.0.0.1:0 over a
 * database, raw HTTP where status and headers matter, a `@trpc/client` (httpLink, plain JSON)
 * that keeps every response, and GraphQL over fetch.
 */
import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { createTRPCClient, httpLink } from '@trpc/client';
import { migrate, type DrizzleDatabase } from '@idem/drizzle';
import type { IdempotencyEvent } from '@idem/core';
import { createPaymentsApp, type PaymentsApp, type PaymentsAppOptions } from '../src/app.ts';
import { PaymentChannel } from '../src/channel.ts';
import { readConfig } from '../src/config.ts';
import type { PaymentsRouter } from '../src/trpc.ts';

export interface RunningExample {
  url: string;
  app: PaymentsApp;
  /** Every idem event the app emitted, in order. */
  events: IdempotencyEvent[];
  close(): Promise<void>;
}

/** Creates the idem tables and the channel's ledger (both safe to repeat). */
export async function migrateExample(db: DrizzleDatabase): Promise<void> {
  await migrate(db);
  await new PaymentChannel(db).migrate();
}

/**
 * The example as `main.ts` builds it, configured from `env` the way `npm start` reads it
 * (IDEM_TTL, IDEM_LEASE, CHANNEL_DELAY_MS, CORS_ORIGIN, ADMIN_TOKEN, IDEM_SEMANTICS), over `db`, on a free port of 127.0.0.1.
 */
export async function startExample(
  db: DrizzleDatabase,
  env: Record<string, string> = {},
  overrides: Pick<PaymentsAppOptions, 'store' | 'atomic'> = {},
): Promise<RunningExample> {
  const config = readConfig(env);
  const events: IdempotencyEvent[] = [];
  const app = createPaymentsApp({
    db,
    retentionMs: config.retentionMs,
    leaseMs: config.leaseMs,
    channelDelayMs: config.channelDelayMs,
    corsOrigins: config.corsOrigins,
    adminToken: config.adminToken,
    semantics: config.semantics,
    onEvent: (event) => events.push(event),
    ...overrides,
  });
  await new Promise<void>((resolve) => app.server.listen(0, '127.0.0.1', resolve));
  const { port } = app.server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    app,
    events,
    async close() {
      app.server.closeAllConnections();
      await new Promise<void>((resolve) => app.server.close(() => resolve()));
      await app.drain();
    },
  };
}

export const newKey = () => `order-${randomUUID()}`;

export interface Reply {
  status: number;
  headers: Headers;
  /** The body as sent, to compare replays byte for byte. */
  text: string;
  body: any;
}

async function reply(response: Response): Promise<Reply> {
  const text = await response.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  return { status: response.status, headers: response.headers, text, body };
}

/** POSTs `input` to a tRPC mutation the way `httpLink` does without a transformer. */
export async function mutate(
  url: string,
  path: string,
  input: unknown,
  headers: Record<string, string> = {},
): Promise<Reply> {
  return reply(
    await fetch(`${url}/trpc/${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(input),
    }),
  );
}

/** POSTs a GraphQL operation to `/graphql`. */
export async function graphql(
  url: string,
  query: string,
  { variables, headers = {} }: { variables?: Record<string, unknown>; headers?: Record<string, string> } = {},
): Promise<Reply> {
  return reply(
    await fetch(`${url}/graphql`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/graphql-response+json, application/json',
        ...headers,
      },
      body: JSON.stringify({ query, ...(variables ? { variables } : {}) }),
    }),
  );
}

export async function get(url: string, path: string, headers: Record<string, string> = {}): Promise<Reply> {
  return reply(await fetch(`${url}${path}`, { headers }));
}

/** A typed tRPC client (httpLink, plain JSON) that keeps every HTTP response it got. */
export function trpcClient(url: string, headers: Record<string, string> = {}) {
  const responses: Response[] = [];
  const trpc = createTRPCClient<PaymentsRouter>({
    links: [
      httpLink({
        url: `${url}/trpc`,
        headers: () => headers,
        fetch: async (input, init) => {
          const response = await fetch(input, init as RequestInit);
          responses.push(response);
          return response;
        },
      }),
    ],
  });
  return { trpc, responses, lastHeaders: () => responses.at(-1)!.headers };
}

export interface LedgerEntry {
  id: string;
  amount: number;
  currency: string;
}

/** Every charge the channel saw, through `payments.ledger`. */
export async function ledger(url: string): Promise<LedgerEntry[]> {
  return trpcClient(url).trpc.payments.ledger.query();
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
