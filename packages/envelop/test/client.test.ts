/**
 * Black-box: `createIdempotentFetch` (`@idem/envelop/client`) against a real GraphQL Yoga
 * server on 127.0.0.1 with `useYogaIdempotency` over a MemoryStore and its policy published at
 * /idempotency (R4). Faults are injected in the underlying `fetch`.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { createSchema, createYoga } from 'graphql-yoga';
import { GraphQLError } from 'graphql';
import { createPolicyDocument, MemoryStore, sharedPrincipal, type Duration, type IdempotencyEvent } from '@idem/core';
import { useYogaIdempotency } from '@idem/envelop';
import {
  createIdempotentFetch,
  describeOperation,
  RetentionWindowExceededError,
  type IdempotentFetchOptions,
  type RetryNotice,
} from '@idem/envelop/client';
import { untilEvent, untilExpired } from '../../../test/support/waiting.ts';

const QUOTED_UUID = /^"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"$/;

function deferred() {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

function createShop(retention: Duration) {
  const calls = { createPayment: 0, slowPayment: 0, reserveName: 0, policy: 0 };
  let hold = { started: deferred(), gate: deferred() };
  const schema = createSchema({
    typeDefs: /* GraphQL */ `
      type Query { payments: Int! sawKey: Boolean! }
      type Payment { id: ID! amount: Int! }
      type Mutation {
        createPayment(amount: Int!, idempotencyKey: String): Payment
        slowPayment(amount: Int!): Payment
        reserveName(name: String!): Payment
      }
    `,
    resolvers: {
      Query: {
        payments: () => calls.createPayment,
        sawKey: (_: unknown, __: unknown, { request }: { request: Request }) => request.headers.has('idempotency-key'),
      },
      Mutation: {
        createPayment: (_: unknown, { amount }: { amount: number }) => ({ id: `pay_${++calls.createPayment}`, amount }),
        slowPayment: async (_: unknown, { amount }: { amount: number }) => {
          const current = hold;
          calls.slowPayment += 1;
          current.started.resolve();
          await current.gate.promise;
          return { id: `pay_slow_${calls.slowPayment}`, amount };
        },
        reserveName: () => {
          calls.reserveName += 1;
          throw new GraphQLError('that name is taken', { extensions: { code: 'NAME_TAKEN', http: { status: 409 } } });
        },
      },
    },
  });
  const store = new MemoryStore();
  const events: IdempotencyEvent[] = [];
  const plugin = useYogaIdempotency({
    store,
    principal: sharedPrincipal,
    retention,
    onEvent: (event) => void events.push(event),
  });
  const yoga = createYoga({ schema, logging: false, plugins: [plugin] });
  const { retentionMs, leaseMs } = plugin.engine.policy;
  const policy = createPolicyDocument({
    documentationUrl: '/idempotency',
    endpoints: ['createPayment', 'slowPayment', 'reserveName'].map((field) => ({
      endpoint: `GraphQL Mutation.${field}`,
      transport: 'graphql' as const,
      operation: `Mutation.${field}`,
      keySources: ['Idempotency-Key header'],
      required: false,
      retentionMs,
      leaseMs,
      expiredReuse: 'execute' as const,
      stored: 'the whole result',
      fingerprint: 'the normalized operation and its variables',
    })),
  });
  const server = createServer((req, res) => {
    if (req.url === '/idempotency') {
      calls.policy += 1;
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(policy));
    } else void yoga(req, res);
  });
  return {
    server,
    store,
    events,
    calls,
    hold() {
      hold = { started: deferred(), gate: deferred() };
      return { started: hold.started.promise, release: hold.gate.resolve };
    },
  };
}

const servers: Server[] = [];
afterEach(async () => {
  for (const server of servers.splice(0)) {
    server.closeAllConnections();
    await new Promise((done) => server.close(done));
  }
});

async function start(retention: Duration = '24h') {
  const shop = createShop(retention);
  await new Promise<void>((resolve) => shop.server.listen(0, '127.0.0.1', resolve));
  servers.push(shop.server);
  const url = `http://127.0.0.1:${(shop.server.address() as AddressInfo).port}`;
  return { ...shop, url, graphql: `${url}/graphql` };
}

interface Sent {
  key: string | null;
  body: any;
  status?: number;
  replayed?: boolean;
}
type Fault = (send: () => Promise<Response>) => Promise<Response>;

/** The underlying `fetch`: records every GraphQL request, and applies the next queued fault. */
function wire() {
  const sent: Sent[] = [];
  const faults: Fault[] = [];
  const fetch = async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
    if (String(input).endsWith('/idempotency')) return globalThis.fetch(input, init);
    const record: Sent = {
      key: new Headers(init?.headers).get('idempotency-key'),
      body: JSON.parse(String(init?.body)),
    };
    sent.push(record);
    const send = async () => {
      const response = await globalThis.fetch(input, init);
      record.status = response.status;
      record.replayed = response.headers.get('idempotent-replayed') === 'true';
      return response;
    };
    const fault = faults.shift();
    return fault ? fault(send) : send();
  };
  return { fetch, sent, faults };
}

const loseResponse: Fault = async (send) => {
  await (await send()).arrayBuffer();
  throw new TypeError('fetch failed');
};
const dropWhenStarted =
  (started: Promise<void>): Fault =>
  async (send) => {
    void send().catch(() => {});
    await started;
    throw new TypeError('fetch failed');
  };
const refuseConnection: Fault = async () => {
  throw new TypeError('fetch failed');
};

function clientOf(shop: { url: string; graphql: string }, options: Partial<IdempotentFetchOptions> = {}) {
  const network = wire();
  const idempotentFetch = createIdempotentFetch({
    policyUrl: `${shop.url}/idempotency`,
    fetch: network.fetch,
    ...options,
  } as IdempotentFetchOptions);
  /** Posts a GraphQL request the way graphql-request and urql do: `fetch(url, init)` with a JSON string body. */
  const post = async (
    body: { query: string; variables?: object; operationName?: string },
    headers: Record<string, string> = {},
    signal?: AbortSignal,
  ) => {
    const response = await idempotentFetch(shop.graphql, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/graphql-response+json, application/json',
        ...headers,
      },
      body: JSON.stringify(body),
      ...(signal ? { signal } : {}),
    });
    return { status: response.status, headers: response.headers, body: await response.json() };
  };
  return { post, ...network };
}

const CREATE = {
  query: 'mutation Pay($amount: Int!) { createPayment(amount: $amount) { id amount } }',
  variables: { amount: 42 },
};
const SLOW = { query: 'mutation { slowPayment(amount: 42) { id amount } }' };

describe('createIdempotentFetch against a real GraphQL Yoga server', () => {
  it('E2: a mutation whose response was lost is retried with the same key and gets the replay; the resolver ran once', async () => {
    const shop = await start();
    const { post, sent, faults } = clientOf(shop);
    faults.push(loseResponse);

    const response = await post(CREATE);

    expect(response.status).toBe(200);
    expect(response.body.data).toEqual({ createPayment: { id: 'pay_1', amount: 42 } });
    expect(response.headers.get('idempotent-replayed')).toBe('true');
    expect(sent).toHaveLength(2);
    expect(sent[0]!.key).toMatch(QUOTED_UUID);
    expect(sent[1]!.key).toBe(sent[0]!.key);
    expect(shop.calls.createPayment).toBe(1);
  });

  it('retries a request that never left the client, with the same key, and it executes once', async () => {
    const shop = await start();
    const { post, sent, faults } = clientOf(shop);
    faults.push(refuseConnection);
    const response = await post(CREATE);
    expect(response.body.data).toEqual({ createPayment: { id: 'pay_1', amount: 42 } });
    expect(sent.map((s) => [s.key, s.status, s.replayed])).toEqual([
      [sent[0]!.key, undefined, undefined],
      [sent[0]!.key, 200, false],
    ]);
    expect(shop.calls.createPayment).toBe(1);
  });

  it('gives every mutation call its own key', async () => {
    const shop = await start();
    const { post, sent } = clientOf(shop);
    await post(CREATE);
    await post(CREATE);
    expect(sent[0]!.key).not.toBe(sent[1]!.key);
    expect(shop.calls.createPayment).toBe(2);
  });

  it("E3: a retry that meets 409 waits the server's Retry-After, then gets the replay of the first execution", async () => {
    const shop = await start();
    const held = shop.hold();
    const notices: RetryNotice[] = [];
    const { post, sent, faults } = clientOf(shop, {
      onRetry: (notice) => {
        notices.push(notice);
        if (notice.reason === 'in_progress') held.release();
      },
    });
    faults.push(dropWhenStarted(held.started));

    const response = await post(SLOW);

    expect(response.body.data).toEqual({ slowPayment: { id: 'pay_slow_1', amount: 42 } });
    expect(notices.map((n) => n.reason)).toEqual(['network', 'in_progress']);
    expect(notices[1]!.delayMs).toBeGreaterThanOrEqual(1000);
    expect((notices[1]!.error as Error).message).toBe('[idem] the server answered 409 IDEMPOTENCY_REQUEST_IN_PROGRESS');
    expect(sent.slice(1).map((s) => [s.status, s.replayed])).toEqual([
      [409, false],
      [200, true],
    ]);
    expect(shop.calls.slowPayment).toBe(1);
  });

  describe('what is never retried', () => {
    it("F3: a 422 is returned as it is; the caller's own key is kept (sent as an sf-string)", async () => {
      const shop = await start();
      const { post, sent } = clientOf(shop);
      await post(CREATE, { 'Idempotency-Key': 'order-42' });

      const reused = await post({ ...CREATE, variables: { amount: 43 } }, { 'Idempotency-Key': 'order-42' });

      expect(reused.status).toBe(422);
      expect(reused.body.errors[0].extensions.code).toBe('IDEMPOTENCY_KEY_REUSED');
      expect(sent.map((s) => s.key)).toEqual(['"order-42"', '"order-42"']);
      expect(shop.calls.createPayment).toBe(1);
    });

    it('a 400 (a document that does not validate) is returned as it is', async () => {
      const shop = await start();
      const { post, sent } = clientOf(shop);
      const response = await post({ query: 'mutation { createPayment(amount: "many") { id } }' });
      expect(response.status).toBe(400);
      expect(sent).toHaveLength(1);
    });

    it("E4: a resolver's own 409 (another extensions.code) is the stored outcome: returned, not retried", async () => {
      const shop = await start();
      const { post, sent } = clientOf(shop);
      const response = await post({ query: 'mutation { reserveName(name: "ada") { id } }' });
      expect(response.status).toBe(409);
      expect(response.body.errors[0]).toMatchObject({
        message: 'that name is taken',
        extensions: { code: 'NAME_TAKEN' },
      });
      expect(sent).toHaveLength(1);
      expect(shop.calls.reserveName).toBe(1);
    });

    it('refuses an invalid caller key before sending anything (K3)', async () => {
      const shop = await start();
      const { post, sent } = clientOf(shop);
      await expect(post(CREATE, { 'Idempotency-Key': 'has space' })).rejects.toMatchObject({
        code: 'idempotency_key_invalid',
      });
      expect(sent).toHaveLength(0);
    });
  });

  it('R2: stops before the published retention ends with RetentionWindowExceededError, instead of a retry the server would run as new', async () => {
    const shop = await start('2s');
    const held = shop.hold();
    const { post, sent, faults } = clientOf(shop);
    faults.push(dropWhenStarted(held.started));

    const error = await post(SLOW).catch((e: unknown) => e);

    // retention 2 s, safety margin 1 s: the 409's Retry-After (1 s) would land past the deadline.
    expect(error).toBeInstanceOf(RetentionWindowExceededError);
    const exceeded = error as RetentionWindowExceededError;
    expect(exceeded).toMatchObject({
      code: 'idempotency_retention_exceeded',
      retentionMs: 2000,
      attempts: 2,
      key: sent[0]!.key!.slice(1, -1),
    });
    expect(sent.map((s) => s.status)).toEqual([undefined, 409]);
    expect(shop.calls.slowPayment).toBe(1);
    expect(shop.calls.policy).toBe(1);

    // What the helper refused to do: past the retention the server recorded, the same key runs again.
    held.release();
    const claimed = await untilEvent(shop.events, (event) => event.type === 'claimed' && event.key === exceeded.key);
    const record = await untilExpired(shop.store, claimed.scope!, exceeded.key);
    expect(record.expiresAt.getTime() - record.completedAt!.getTime()).toBe(2000);
    const late = await fetch(shop.graphql, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': sent[0]!.key! },
      body: JSON.stringify(SLOW),
    });
    expect(late.status).toBe(200);
    expect(late.headers.get('idempotent-replayed')).toBeNull();
    expect(shop.calls.slowPayment).toBe(2);
  });

  it('uses a configured retention without reading any policy', async () => {
    const shop = await start();
    const { post, faults } = clientOf(shop, { retention: '24h', policyUrl: undefined });
    faults.push(loseResponse);
    expect((await post(CREATE)).body.data.createPayment.id).toBe('pay_1');
    expect(shop.calls.policy).toBe(0);
  });

  it('refuses to be created without a retention or a policy URL', () => {
    expect(() => createIdempotentFetch({})).toThrow(
      /\[idem\] createIdempotentFetch needs to know how long the server keeps keys/,
    );
  });

  it("stops when the caller's signal aborts, without another attempt", async () => {
    const shop = await start();
    const controller = new AbortController();
    const { post, sent, faults } = clientOf(shop, { onRetry: () => controller.abort() });
    faults.push(loseResponse);
    await expect(post(CREATE, {}, controller.signal)).rejects.toMatchObject({ name: 'AbortError' });
    expect(sent).toHaveLength(1);
  });

  describe('what passes straight through', () => {
    it('a query: no key, no retry', async () => {
      const shop = await start();
      const { post, sent, faults } = clientOf(shop);
      expect((await post({ query: '{ sawKey }' })).body.data).toEqual({ sawKey: false });
      faults.push(loseResponse);
      await expect(post({ query: 'query { payments }' })).rejects.toThrow('fetch failed');
      expect(sent.map((s) => s.key)).toEqual([null, null]);
    });

    it('a mutation whose root field carries its own argument key: sent as it is, without a header key and without retries', async () => {
      const shop = await start();
      const { post, sent, faults } = clientOf(shop);
      faults.push(loseResponse);
      const keyed = {
        query: 'mutation($key: String) { createPayment(amount: 1, idempotencyKey: $key) { id } }',
        variables: { key: 'pay-1' },
      };
      await expect(post(keyed)).rejects.toThrow('fetch failed');
      expect(sent.map((s) => s.key)).toEqual([null]);

      // A null key argument is no key: the header key applies.
      await post({ ...keyed, variables: { key: null } });
      expect(sent[1]!.key).toMatch(QUOTED_UUID);
    });
  });
});

describe('describeOperation (the parse behind the helper)', () => {
  it('reads the type and root fields of the only operation, through aliases, arguments, directives and nested selections', () => {
    expect(
      describeOperation(`
        # a comment with { braces and "quotes"
        mutation Pay($input: PaymentInput! = { amount: 1, note: "}" }) @log {
          first: createPayment(input: $input, note: """a block "string" with }""") @include(if: true) { id owner { name } }
          refund(id: "1", amounts: [1, -2.5e3]) { id }
        }`),
    ).toEqual({
      type: 'mutation',
      complete: true,
      rootFields: [
        {
          name: 'createPayment',
          arguments: { input: { variable: 'input' }, note: { literal: 'a block "string" with }' } },
          directives: ['include'],
          conditions: [{ literal: true, skip: false }],
        },
        { name: 'refund', arguments: { id: { literal: '1' } }, directives: [] },
      ],
    });
  });

  it('picks the operation by operationName, after fragments, and reads shorthand queries', () => {
    const document =
      'fragment P on Payment { id } query Q { payments } mutation M { createPayment(amount: 1) { ...P } }';
    expect(describeOperation(document, 'M')?.type).toBe('mutation');
    expect(describeOperation(document, 'Q')?.type).toBe('query');
    expect(describeOperation(document)).toBeUndefined();
    expect(describeOperation('{ payments }')).toEqual({
      type: 'query',
      complete: true,
      rootFields: [{ name: 'payments', arguments: {}, directives: [] }],
    });
  });

  it('follows root fields through inline fragments and fragment spreads, with their conditions, the @idempotent key and variable defaults', () => {
    expect(
      describeOperation(`
        mutation ($k: String = "from-default", $on: Boolean) {
          ... on Mutation @include(if: $on) { createPayment(amount: 1, idempotencyKey: $k) { id } }
          ...Pay
        }
        fragment Pay on Mutation { refund(id: "1") @idempotent(key: "r1") { id } }`),
    ).toEqual({
      type: 'mutation',
      complete: true,
      defaults: { k: 'from-default' },
      rootFields: [
        {
          name: 'createPayment',
          arguments: { amount: { literal: '1' }, idempotencyKey: { variable: 'k' } },
          directives: [],
          conditions: [{ variable: 'on', skip: false }],
        },
        {
          name: 'refund',
          arguments: { id: { literal: '1' } },
          directives: ['idempotent'],
          directiveKey: { literal: 'r1' },
        },
      ],
    });
    expect(describeOperation('mutation { ...Missing }')).toEqual({ type: 'mutation', complete: false, rootFields: [] });
  });

  it('gives up on a document it cannot read', () => {
    expect(describeOperation('mutation { createPayment(note: "unterminated) { id } }')).toBeUndefined();
    expect(describeOperation('mutation { createPayment(')).toBeUndefined();
    expect(describeOperation('type Query { a: Int }')).toBeUndefined();
  });
});
