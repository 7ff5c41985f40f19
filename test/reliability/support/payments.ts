/**
 * The payments example's two idempotent endpoints as the suite calls them: tRPC
 * `payments.create` and GraphQL `createPayment`, each with a key from the header or from the
 * input field / argument, and the principal as `Authorization: Bearer <account>` (S1).
 */
import { formatScope } from '@idem/core';
import { getJson, overLoopback, postJson, IDEMPOTENCY_KEY, type Answer, type FetchHandler } from './http.ts';

export interface PaymentInput {
  amount: number;
  currency: string;
}

export interface CallOptions {
  key?: string;
  /** Where the key goes: the `Idempotency-Key` header (default) or the input field / argument. */
  keyIn?: 'header' | 'input';
  account?: string;
  handler?: FetchHandler;
}

export interface PaymentEndpoint {
  name: 'tRPC' | 'GraphQL' | 'HTTP';
  /** The status of a payment that executed: 200 (tRPC, GraphQL), 201 Created (HTTP). */
  created: number;
  create(baseUrl: string, input: PaymentInput, options?: CallOptions): Promise<Answer>;
  /** The stored record's scope for a key sent as `keyIn` by `account` (S1). */
  scope(account: string, keyIn?: 'header' | 'input'): string;
  /** The payment in a successful answer. */
  payment(answer: Answer): { id: string; amount: number; currency: string; createdAt: string } | undefined;
}

/** The principal of a request without `Authorization`. */
export const PUBLIC_ACCOUNT = 'public';

function headersFor({ key, keyIn = 'header', account }: CallOptions): Array<[string, string]> {
  const headers: Array<[string, string]> = [];
  if (key !== undefined && keyIn === 'header') headers.push([IDEMPOTENCY_KEY, key]);
  if (account !== undefined) headers.push(['authorization', `Bearer ${account}`]);
  return headers;
}

export const trpcPayments: PaymentEndpoint = {
  name: 'tRPC',
  created: 200,
  create(baseUrl, input, options = {}) {
    const body =
      options.key !== undefined && options.keyIn === 'input' ? { ...input, idempotencyKey: options.key } : input;
    return postJson(options.handler ?? overLoopback, `${baseUrl}/trpc/payments.create`, body, headersFor(options));
  },
  scope: (account) => formatScope('payments.create', account),
  payment: (answer) => answer.body?.result?.data,
};

const CREATE_PAYMENT = /* GraphQL */ `
  mutation Pay($input: PaymentInput!, $key: String) {
    createPayment(input: $input, idempotencyKey: $key) { id amount currency createdAt }
  }
`;

export const graphqlPayments: PaymentEndpoint = {
  name: 'GraphQL',
  created: 200,
  create(baseUrl, input, options = {}) {
    const key = options.key !== undefined && options.keyIn === 'input' ? options.key : null;
    return postJson(
      options.handler ?? overLoopback,
      `${baseUrl}/graphql`,
      { query: CREATE_PAYMENT, variables: { input, key } },
      headersFor(options),
    );
  },
  // A header key makes the operation one record; an argument key, the field (docs/graphql-yoga.md).
  scope: (account, keyIn = 'header') =>
    formatScope(keyIn === 'header' ? 'mutation:createPayment' : 'Mutation.createPayment', account),
  payment: (answer) => answer.body?.data?.createPayment ?? undefined,
};

/** `POST /v1/payments` (Hono, `@idem/fetch/hono`): the payment is the whole response body, 201. */
export const restPayments: PaymentEndpoint = {
  name: 'HTTP',
  created: 201,
  create(baseUrl, input, options = {}) {
    const body =
      options.key !== undefined && options.keyIn === 'input' ? { ...input, idempotencyKey: options.key } : input;
    return postJson(options.handler ?? overLoopback, `${baseUrl}/v1/payments`, body, headersFor(options));
  },
  scope: (account) => formatScope('POST /v1/payments', account),
  payment: (answer) => (answer.status === 201 ? answer.body : undefined),
};

export const PAYMENT_ENDPOINTS = [trpcPayments, graphqlPayments] as const;

export interface LedgerEntry {
  id: string;
  amount: number;
  currency: string;
}

/** Every charge the simulated channel saw (shared by every process on the database). */
export async function ledger(baseUrl: string): Promise<LedgerEntry[]> {
  const answer = await getJson(`${baseUrl}/trpc/payments.ledger`);
  if (answer.status !== 200) throw new Error(`[reliability] ledger: ${answer.status} ${answer.text}`);
  return answer.body.result.data as LedgerEntry[];
}
