/**
 * The payments example (examples/payments) as the client tests use it: the app `npm start`
 * builds, over a SQLite file, on 127.0.0.1, with a {@link LossyProxy} in front of it. The
 * clients send their mutations through the proxy; the policy (`/idempotency`) and the ledger
 * are read from the server directly, so only mutation answers are ever lost.
 */
import type { IdempotencyEvent } from '@idem/core';
import { openSqliteTarget } from '../../../packages/drizzle/test/sqlite-target.ts';
import { ledger, migrateExample, startExample, type LedgerEntry } from '../../../examples/payments/test/http.ts';
import { startLossyProxy, type LossyProxy, type ProxiedRequest } from './lossy-proxy.ts';

export interface PaymentsUnderTest {
  /** `/graphql` (or `/apollo/graphql`) through the proxy: where the clients send their mutations. */
  graphqlUrl: string;
  /** `/trpc` through the proxy. */
  trpcUrl: string;
  /** The server itself, not through the proxy (its status lookups, its ledger). */
  serverUrl: string;
  /** The published policy, read from the server directly (R4). */
  policyUrl: string;
  proxy: LossyProxy;
  /** Every idem event of the server. */
  events: readonly IdempotencyEvent[];
  /** Resolves with the first event (already emitted or to come) that matches. */
  waitForEvent(match: (event: IdempotencyEvent) => boolean): Promise<IdempotencyEvent>;
  /** The charges the channel saw for `amount` (each test pays its own amount). */
  charges(amount: number): Promise<LedgerEntry[]>;
  /** The GraphQL requests (POST, and GET with a query string) the proxy saw since `from` (an index into `proxy.requests`). */
  graphqlRequests(from?: number): ProxiedRequest[];
  close(): Promise<void>;
}

/**
 * Starts the example with `env` (IDEM_TTL, IDEM_LEASE, CHANNEL_DELAY_MS, as `npm start` reads them).
 * `graphqlPath` picks the GraphQL host the clients talk to: Yoga's `/graphql` (the default) or
 * Apollo Server's `/apollo/graphql`.
 */
export async function startPayments(
  env: Record<string, string> = { IDEM_TTL: '30m' },
  { graphqlPath = '/graphql' }: { graphqlPath?: string } = {},
): Promise<PaymentsUnderTest> {
  const target = await openSqliteTarget();
  await migrateExample(target.db);
  const example = await startExample(target.db, env);
  const proxy = await startLossyProxy(example.url);
  return {
    graphqlUrl: `${proxy.url}${graphqlPath}`,
    trpcUrl: `${proxy.url}/trpc`,
    serverUrl: example.url,
    policyUrl: `${example.url}/idempotency`,
    proxy,
    events: example.events,
    async waitForEvent(match) {
      for (;;) {
        const found = example.events.find(match);
        if (found) return found;
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    },
    charges: async (amount) => (await ledger(example.url)).filter((entry) => entry.amount === amount),
    graphqlRequests: (from = 0) =>
      proxy.requests
        .slice(from)
        .filter((request) => request.path === graphqlPath || request.path.startsWith(`${graphqlPath}?`)),
    async close() {
      await proxy.close();
      await example.close();
      await target.close();
    },
  };
}

/** The example's mutation, as the clients send it. */
export const PAY = /* GraphQL */ `
  mutation Pay($input: PaymentInput!) {
    createPayment(input: $input) { id amount currency }
  }
`;

export interface Payment {
  id: string;
  amount: number;
  currency: string;
}

/** The distinct keys among `requests`. */
export const keysOf = (requests: readonly ProxiedRequest[]) => [
  ...new Set(requests.map((request) => request.idempotencyKey)),
];
