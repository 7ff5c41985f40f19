/**
 * Black-box: `idempotencyLink` with the links create-t3-app's client uses, against a real
 * t3-shaped server (fetchRequestHandler, superjson, createTRPCContext({ headers })) over HTTP.
 *
 * - `httpBatchStreamLink` (t3's default) and `httpBatchLink`, with keys in the input field:
 *   every call carries its own key, so batches are safe, and everything the link needs — the
 *   409/503 code, `retryAfter`, the replayed-error marker — is in the body, which is all a
 *   stream can carry (its status and headers leave before the procedures run).
 * - `splitLink` sending mutations through `httpLink`, for servers that take header keys.
 *
 * Faults are injected in the client's `fetch`: the request reaches the server and every call
 * runs, then the answer is lost (whole, or cut after the stream's first line).
 */
import { afterEach, describe, expect, it } from 'vitest';
import {
  createTRPCClient,
  httpBatchLink,
  httpBatchStreamLink,
  httpLink,
  splitLink,
  TRPCClientError,
  type TRPCLink,
} from '@trpc/client';
import superjson from 'superjson';
import { idempotencyHeaders, idempotencyLink, type IdempotencyLinkOptions, type RetryNotice } from '../src/link.ts';
import type { RunningServer } from './http.ts';
import { createT3App, serveFetchHandler, type T3Router } from './t3.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

const running: RunningServer[] = [];
afterEach(async () => {
  for (const server of running.splice(0)) await server.close();
});

async function start() {
  const app = createT3App();
  const server = await serveFetchHandler(app.handler);
  running.push(server);
  return { ...app, url: `${server.url}/api/trpc` };
}

interface Sent {
  path: string;
  stream: boolean;
  /** The input keys of the request's calls, in order (superjson-encoded bodies). */
  inputKeys: Array<string | undefined>;
  headerKey: string | null;
  status?: number;
  replayed?: boolean;
}
type Fault = (send: () => Promise<Response>) => Promise<Response>;

function inputKeysOf(body: unknown, batch: boolean): Array<string | undefined> {
  if (typeof body !== 'string') return [];
  const parsed = JSON.parse(body) as Record<string, unknown>;
  const inputs = batch ? Object.values(parsed) : [parsed];
  return inputs.map(
    (input) => (superjson.deserialize(input as never) as { idempotencyKey?: string } | undefined)?.idempotencyKey,
  );
}

/** The client's `fetch`: records every request, applies the next queued fault. */
function wire() {
  const sent: Sent[] = [];
  const faults: Fault[] = [];
  const fetch = async (url: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const target = new URL(String(url));
    const headers = new Headers(init?.headers);
    const batch = target.searchParams.get('batch') === '1';
    const record: Sent = {
      path: target.pathname.replace('/api/trpc/', ''),
      stream: headers.get('trpc-accept') === 'application/jsonl',
      inputKeys: inputKeysOf(init?.body, batch),
      headerKey: headers.get('idempotency-key'),
    };
    sent.push(record);
    const send = async () => {
      const response = await globalThis.fetch(url, init);
      record.status = response.status;
      record.replayed = response.headers.get('idempotent-replayed') === 'true';
      return response;
    };
    const fault = faults.shift();
    return fault ? fault(send) : send();
  };
  return { fetch, sent, faults };
}

/** Every call of the request ran; the answer never came back. */
const loseResponse: Fault = async (send) => {
  await (await send()).arrayBuffer();
  throw new TypeError('fetch failed');
};
/** Every call ran and the 200 and its headers arrived; the body was cut after its first line (the stream's head). */
const cutAfterFirstLine: Fault = async (send) => {
  const response = await send();
  const text = await response.text();
  const head = text.slice(0, text.indexOf('\n') + 1);
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      controller.enqueue(new TextEncoder().encode(head));
      controller.error(new TypeError('terminated'));
    },
  });
  return new Response(body, { status: response.status, headers: response.headers });
};

type Terminating = 'stream' | 'batch' | 'split';

function clientOf(url: string, terminating: Terminating, options: Partial<IdempotencyLinkOptions> = {}) {
  const network = wire();
  const common = { url, transformer: superjson, fetch: network.fetch };
  const links: Record<Terminating, () => TRPCLink<T3Router>> = {
    stream: () => httpBatchStreamLink(common),
    batch: () => httpBatchLink(common),
    // Mutations alone through httpLink, with the header key; queries keep t3's stream link.
    split: () =>
      splitLink({
        condition: (op) => op.type === 'mutation',
        true: httpLink({ ...common, headers: ({ op }) => idempotencyHeaders(op) }),
        false: httpBatchStreamLink(common),
      }),
  };
  const link = idempotencyLink<T3Router>({
    retention: '24h',
    key: { header: terminating === 'split' },
    initialDelayMs: 10,
    ...options,
  } as IdempotencyLinkOptions);
  return { trpc: createTRPCClient<T3Router>({ links: [link, links[terminating]()] }), ...network };
}

async function rejection(promise: Promise<unknown>): Promise<TRPCClientError<any>> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  if (!(error instanceof TRPCClientError)) throw new Error(`expected a TRPCClientError, got ${String(error)}`);
  return error;
}

describe.each(['stream', 'batch'] as const)(
  'idempotencyLink + %s link (t3 server, input-field keys)',
  (terminating) => {
    const label = terminating === 'stream' ? 'httpBatchStreamLink' : 'httpBatchLink';

    it(`E2: through ${label}, a mutation whose response was lost is retried with the same input key and gets the replay; the resolver ran once`, async () => {
      const app = await start();
      const { trpc, sent, faults } = clientOf(app.url, terminating);
      faults.push(loseResponse);

      const payment = await trpc.payment.create.mutate({ amount: 42 });

      expect(payment).toEqual({ id: 'pay_1_1', amount: 42, at: new Date(0) });
      expect(sent.map((s) => s.stream)).toEqual([terminating === 'stream', terminating === 'stream']);
      expect(sent[0]!.inputKeys).toEqual([expect.stringMatching(UUID)]);
      expect(sent[1]!.inputKeys).toEqual(sent[0]!.inputKeys);
      expect(app.calls.create).toBe(1);
    });

    it(`E2: two mutations batched into one ${label} request carry a key each; after the lost answer both are replayed, each ran once`, async () => {
      const app = await start();
      const { trpc, sent, faults } = clientOf(app.url, terminating);
      faults.push(terminating === 'stream' ? cutAfterFirstLine : loseResponse);

      const [a, b] = await Promise.all([
        trpc.payment.create.mutate({ amount: 1 }),
        trpc.payment.create.mutate({ amount: 2 }),
      ]);

      expect([a.amount, b.amount]).toEqual([1, 2]);
      expect(a.id).not.toBe(b.id);
      // One HTTP request carried both calls, with two different keys; the retry, the same two.
      expect(sent[0]).toMatchObject({ path: 'payment.create,payment.create', status: 200 });
      const [keyA, keyB] = sent[0]!.inputKeys;
      expect(keyA).toMatch(UUID);
      expect(keyB).toMatch(UUID);
      expect(keyA).not.toBe(keyB);
      expect(
        sent
          .slice(1)
          .flatMap((s) => s.inputKeys)
          .sort(),
      ).toEqual([keyA, keyB].sort());
      expect(app.calls.create).toBe(2);
    });

    it(`E3: through ${label}, a retry that meets 409 waits data.idempotency.retryAfter from the body, then gets the replay`, async () => {
      const app = await start();
      const held = app.hold();
      const notices: RetryNotice[] = [];
      const { trpc, sent, faults } = clientOf(app.url, terminating, {
        onRetry: (notice) => {
          notices.push(notice);
          if (notice.reason === 'in_progress') held.release();
        },
      });
      // The connection drops while the resolver runs: the client learns nothing.
      faults.push(async (send) => {
        void send().catch(() => {});
        await held.started;
        throw new TypeError('fetch failed');
      });

      const payment = await trpc.payment.slow.mutate({ amount: 7 });

      expect(payment.amount).toBe(7);
      expect(notices.map((n) => n.reason)).toEqual(['network', 'in_progress']);
      // Retry-After (1 s) came in the body: a stream cannot carry the header.
      expect(notices[1]!.delayMs).toBeGreaterThanOrEqual(1000);
      expect(new Set(sent.flatMap((s) => s.inputKeys)).size).toBe(1);
      expect(app.calls.slow).toBe(1);
    });

    it(`E4: through ${label}, the resolver's own CONFLICT is retried once at most: its replay is marked as one and ends the retries`, async () => {
      const app = await start();
      const { trpc, sent } = clientOf(app.url, terminating);

      const error = await rejection(trpc.payment.taken.mutate({ amount: 3 }));

      expect(error.message).toBe('that order was already paid');
      expect(error.data).toMatchObject({ code: 'CONFLICT' });
      expect(sent).toHaveLength(2);
      if (terminating === 'stream') {
        // The stream's headers left before the call ran: the marker is in the call's own body.
        expect(error.data.idempotentReplayed).toBe(true);
      } else {
        // A batch of one call: the header speaks for it, and its body is the first answer's.
        expect(sent[1]!.replayed).toBe(true);
        expect(error.data.idempotentReplayed).toBeUndefined();
      }
      expect(app.calls.taken).toBe(1);
    });
  },
);

describe('idempotencyLink + splitLink: mutations through httpLink with the header key, queries through httpBatchStreamLink', () => {
  it('E2: a mutation whose response was lost is retried with the same Idempotency-Key and the replay carries Idempotent-Replayed; the query streamed', async () => {
    const app = await start();
    const { trpc, sent, faults } = clientOf(app.url, 'split');
    faults.push(loseResponse);

    const payment = await trpc.payment.createByHeader.mutate({ amount: 9 });
    const count = await trpc.payment.count.query();

    expect(payment).toEqual({ id: 'pay_h_1_1', amount: 9 });
    expect(count).toBe(1);
    expect(sent.map((s) => [s.path, s.stream])).toEqual([
      ['payment.createByHeader', false],
      ['payment.createByHeader', false],
      ['payment.count', true],
    ]);
    expect(sent[0]!.headerKey).toMatch(/^"[0-9a-f-]{36}"$/);
    expect(sent[1]).toMatchObject({ headerKey: sent[0]!.headerKey, status: 200, replayed: true });
    expect(app.calls.createByHeader).toBe(1);
  });

  it('S1/E2: concurrent mutations never share a request, so each header key is its own record', async () => {
    const app = await start();
    const { trpc, sent } = clientOf(app.url, 'split');

    const [a, b] = await Promise.all([
      trpc.payment.createByHeader.mutate({ amount: 1 }),
      trpc.payment.createByHeader.mutate({ amount: 2 }),
    ]);

    expect(a.id).not.toBe(b.id);
    expect(sent).toHaveLength(2);
    expect(sent[0]!.headerKey).not.toBe(sent[1]!.headerKey);
    expect(app.calls.createByHeader).toBe(2);
  });
});
