/**
 * Black-box: `idempotencyLink` in a real `@trpc/client`, against a real tRPC server on
 * 127.0.0.1 running the `idempotency()` middleware over a MemoryStore, with its policy
 * published at /idempotency (R4). Faults are injected in the client's `fetch`: the request
 * reaches the server and runs, the response is lost — the seed's timeout.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { initTRPC, TRPCError } from '@trpc/server';
import { createHTTPHandler, type CreateHTTPContextOptions } from '@trpc/server/adapters/standalone';
import {
  createTRPCClient,
  httpBatchLink,
  httpBatchStreamLink,
  httpLink,
  retryLink,
  TRPCClientError,
  type TRPCLink,
} from '@trpc/client';
import fc from 'fast-check';
import { z } from 'zod';
import { createPolicyDocument, formatScope, MemoryStore, type EndpointPolicyDescription } from '@idem/core';
import { idempotency, idempotencyContext, idempotencyErrorFormatter, sharedPrincipal } from '../src/index.ts';
import {
  idempotencyHeaders,
  idempotencyLink,
  RetentionWindowExceededError,
  RetriesExhaustedError,
  UnresolvedOperationError,
  type IdempotencyLinkOptions,
  type RetryNotice,
} from '../src/link.ts';
import { untilExpired } from '../../../test/support/waiting.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const QUOTED_UUID = new RegExp(`^"${UUID.source.slice(1, -1)}"$`);

function deferred() {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

/** The server: a few procedures that count their resolver runs, and the published policy. */
function createShop({ retention = '24h' }: { retention?: string } = {}) {
  const store = new MemoryStore();
  const calls = {
    charge: 0,
    slowCharge: 0,
    chargeByInput: 0,
    reserveName: 0,
    explode: 0,
    optionalCharge: 0,
    resumableCharge: 0,
    resumableByInput: 0,
    declinedCharge: 0,
    policy: 0,
  };
  /** E8: how many times in a row `resumableCharge` fails (a provider timeout) before it succeeds. */
  const failures = { resumableCharge: 1, resumableByInput: 1 };
  let hold = { started: deferred(), gate: deferred() };
  const createContext = (opts: CreateHTTPContextOptions) => ({
    sawKey: opts.req.headers['idempotency-key'] !== undefined,
    ...idempotencyContext(opts),
  });
  const t = initTRPC
    .context<ReturnType<typeof createContext>>()
    .create({ errorFormatter: idempotencyErrorFormatter, isDev: false });
  const common = { store, principal: sharedPrincipal, retention: retention as `${number}h` };
  const idempotent = idempotency(common);
  const byInput = idempotency({ ...common, key: { header: false } });
  const optional = idempotency({ ...common, required: false });
  const resumable = idempotency({ ...common, onFailure: 'resume' });
  const resumableByInputKey = idempotency({ ...common, onFailure: 'resume', key: { header: false } });
  const amount = z.object({ amount: z.number().int().positive() });

  const router = t.router({
    charge: t.procedure
      .input(amount)
      .use(idempotent)
      .mutation(({ input }) => ({ charge: `ch_${++calls.charge}`, amount: input.amount })),
    slowCharge: t.procedure
      .input(amount)
      .use(idempotent)
      .mutation(async ({ input }) => {
        const current = hold;
        calls.slowCharge += 1;
        current.started.resolve();
        await current.gate.promise;
        return { charge: `ch_slow_${calls.slowCharge}`, amount: input.amount };
      }),
    chargeByInput: t.procedure
      .input(amount.extend({ idempotencyKey: z.string().optional() }))
      .use(byInput)
      .mutation(({ input }) => ({ charge: `ch_input_${++calls.chargeByInput}`, amount: input.amount })),
    echoByInput: t.procedure
      .input(z.any())
      .use(byInput)
      .mutation(({ input }) => input),
    reserveName: t.procedure
      .input(z.object({ name: z.string() }))
      .use(idempotent)
      .mutation((): never => {
        calls.reserveName += 1;
        throw new TRPCError({ code: 'CONFLICT', message: 'that name is taken' });
      }),
    explode: t.procedure
      .input(amount)
      .use(idempotent)
      .mutation((): never => {
        calls.explode += 1;
        throw new Error('payment channel exploded');
      }),
    optionalCharge: t.procedure
      .input(amount)
      .use(optional)
      .mutation(({ input }) => ({ charge: `ch_opt_${++calls.optionalCharge}`, amount: input.amount })),
    resumableCharge: t.procedure
      .input(amount)
      .use(resumable)
      .mutation(({ input }) => {
        calls.resumableCharge += 1;
        if (failures.resumableCharge-- > 0) throw new Error('provider timeout');
        return { charge: `ch_resumed_${calls.resumableCharge}`, amount: input.amount };
      }),
    resumableByInput: t.procedure
      .input(amount.extend({ idempotencyKey: z.string().optional() }))
      .use(resumableByInputKey)
      .mutation(({ input }) => {
        calls.resumableByInput += 1;
        if (failures.resumableByInput-- > 0) throw new Error('provider timeout');
        return { charge: `ch_resumed_input_${calls.resumableByInput}`, amount: input.amount };
      }),
    declinedCharge: t.procedure
      .input(amount)
      .use(resumable)
      .mutation((): never => {
        calls.declinedCharge += 1;
        throw new TRPCError({ code: 'PRECONDITION_FAILED', message: 'card declined' });
      }),
    sawKey: t.procedure.query(({ ctx }) => ctx.sawKey),
  });

  const describeEndpoint = (operation: string): EndpointPolicyDescription => ({
    endpoint: `tRPC mutation ${operation}`,
    transport: 'trpc',
    operation,
    keySources: ['Idempotency-Key header'],
    required: true,
    retentionMs: idempotent.engine.policy.retentionMs,
    leaseMs: idempotent.engine.policy.leaseMs,
    expiredReuse: 'execute',
    stored: 'the output or the error',
    fingerprint: 'the validated input',
  });
  const policy = createPolicyDocument({
    documentationUrl: '/idempotency',
    endpoints: [
      ...['charge', 'slowCharge', 'chargeByInput', 'reserveName', 'explode'].map(describeEndpoint),
      ...['resumableCharge', 'resumableByInput', 'declinedCharge'].map((operation) => ({
        ...describeEndpoint(operation),
        retentionMs: resumable.engine.policy.retentionMs,
        onFailure: 'resume' as const,
      })),
    ],
  });

  const trpc = createHTTPHandler({ router, createContext, basePath: '/trpc/' });
  const server = createServer((req, res) => {
    if (req.url === '/idempotency') {
      calls.policy += 1;
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(policy));
    } else if (req.url?.startsWith('/trpc/')) void trpc(req, res);
    else res.writeHead(404).end();
  });
  return {
    server,
    router,
    store,
    calls,
    failures,
    /** Holds `slowCharge` resolvers until `release()`; `started` resolves when one runs. */
    hold() {
      hold = { started: deferred(), gate: deferred() };
      return { started: hold.started.promise, release: hold.gate.resolve };
    },
  };
}
type ShopRouter = ReturnType<typeof createShop>['router'];

const servers: Server[] = [];
afterEach(async () => {
  for (const server of servers.splice(0)) {
    server.closeAllConnections();
    await new Promise((done) => server.close(done));
  }
});

async function start(options?: { retention?: string }) {
  const shop = createShop(options);
  await new Promise<void>((resolve) => shop.server.listen(0, '127.0.0.1', resolve));
  servers.push(shop.server);
  const url = `http://127.0.0.1:${(shop.server.address() as AddressInfo).port}`;
  return { ...shop, url };
}

interface Sent {
  key: string | null;
  body: any;
  status?: number;
  replayed?: boolean;
}
type Fault = (send: () => Promise<Response>) => Promise<Response>;

/** The client's `fetch`: records every request it sends, and applies the next queued fault. */
function wire() {
  const sent: Sent[] = [];
  const faults: Fault[] = [];
  const fetch = async (url: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const record: Sent = {
      key: new Headers(init?.headers).get('idempotency-key'),
      body: init?.body ? JSON.parse(String(init.body)) : undefined,
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

/** The request reached the server and ran; its response never came back. */
const loseResponse: Fault = async (send) => {
  await (await send()).arrayBuffer();
  throw new TypeError('fetch failed');
};
/** The request reached the server; the connection dropped once the resolver had started (it keeps running). */
const dropWhenStarted =
  (started: Promise<void>): Fault =>
  async (send) => {
    void send().catch(() => {});
    await started;
    throw new TypeError('fetch failed');
  };
/** The request never left the client. */
const refuseConnection: Fault = async () => {
  throw new TypeError('fetch failed', {
    cause: Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }),
  });
};

function clientOf(
  url: string,
  options: Partial<IdempotencyLinkOptions> & { batch?: boolean; noHeaders?: boolean } = {},
) {
  const { batch, noHeaders, ...linkOptions } = options;
  const network = wire();
  const terminating: TRPCLink<ShopRouter> = batch
    ? httpBatchLink({ url: `${url}/trpc`, fetch: network.fetch })
    : httpLink({
        url: `${url}/trpc`,
        fetch: network.fetch,
        ...(noHeaders ? {} : { headers: ({ op }) => idempotencyHeaders(op) }),
      });
  const link = idempotencyLink({ policyUrl: `${url}/idempotency`, ...linkOptions } as IdempotencyLinkOptions);
  const trpc = createTRPCClient<ShopRouter>({ links: [link, terminating] });
  return { trpc, ...network };
}

async function rejection(promise: Promise<unknown>): Promise<TRPCClientError<any>> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  if (!(error instanceof TRPCClientError)) throw new Error(`expected a TRPCClientError, got ${String(error)}`);
  return error;
}

const unquote = (key: string | null) => key?.slice(1, -1);

describe('idempotencyLink over a real tRPC server', () => {
  it('E2: a mutation whose response was lost is retried with the same key and gets the replay; the resolver ran once', async () => {
    const shop = await start();
    const { trpc, sent, faults } = clientOf(shop.url);
    faults.push(loseResponse);

    const result = await trpc.charge.mutate({ amount: 42 });

    expect(result).toEqual({ charge: 'ch_1', amount: 42 });
    expect(sent).toHaveLength(2);
    expect(sent[0]!.key).toMatch(QUOTED_UUID);
    expect(sent[1]!.key).toBe(sent[0]!.key);
    expect(sent[1]).toMatchObject({ status: 200, replayed: true });
    expect(shop.calls.charge).toBe(1);
  });

  it('retries a request that never left the client, with the same key, and it executes once', async () => {
    const shop = await start();
    const { trpc, sent, faults } = clientOf(shop.url);
    faults.push(refuseConnection, refuseConnection);

    await expect(trpc.charge.mutate({ amount: 5 })).resolves.toEqual({ charge: 'ch_1', amount: 5 });
    expect(new Set(sent.map((s) => s.key)).size).toBe(1);
    expect(sent.map((s) => s.status)).toEqual([undefined, undefined, 200]);
    expect(sent[2]!.replayed).toBe(false);
    expect(shop.calls.charge).toBe(1);
  });

  it('gives every mutation call its own key', async () => {
    const shop = await start();
    const { trpc, sent } = clientOf(shop.url);
    await trpc.charge.mutate({ amount: 1 });
    await trpc.charge.mutate({ amount: 1 });
    expect(sent[0]!.key).not.toBe(sent[1]!.key);
    expect(shop.calls.charge).toBe(2);
  });

  it("E3: a retry that meets 409 waits the server's Retry-After, then gets the replay of the first execution", async () => {
    const shop = await start();
    const held = shop.hold();
    const notices: RetryNotice[] = [];
    const { trpc, sent, faults } = clientOf(shop.url, {
      onRetry: (notice) => {
        notices.push(notice);
        if (notice.reason === 'in_progress') held.release();
      },
    });
    faults.push(dropWhenStarted(held.started));

    const result = await trpc.slowCharge.mutate({ amount: 42 });

    expect(result).toEqual({ charge: 'ch_slow_1', amount: 42 });
    expect(notices.map((n) => n.reason)).toEqual(['network', 'in_progress']);
    expect(notices[1]!.delayMs).toBeGreaterThanOrEqual(1000);
    expect(sent.slice(1).map((s) => [s.status, s.replayed])).toEqual([
      [409, false],
      [200, true],
    ]);
    expect(new Set(sent.map((s) => s.key)).size).toBe(1);
    expect(shop.calls.slowCharge).toBe(1);
  });

  it('E3: resumes a key the caller passes in context, waiting out the first request that still runs', async () => {
    const shop = await start();
    const held = shop.hold();
    const key = crypto.randomUUID();
    const first = clientOf(shop.url).trpc.slowCharge.mutate({ amount: 7 }, { context: { idempotencyKey: key } });
    await held.started;
    const { trpc, sent } = clientOf(shop.url, { onRetry: () => held.release() });

    const resumed = await trpc.slowCharge.mutate({ amount: 7 }, { context: { idempotencyKey: key } });

    expect(resumed).toEqual(await first);
    expect(sent.map((s) => [s.key, s.status])).toEqual([
      [`"${key}"`, 409],
      [`"${key}"`, 200],
    ]);
    expect(shop.calls.slowCharge).toBe(1);
  });

  describe('what is never retried', () => {
    it('F3: a 422 (the key reused with another input) is passed on at once', async () => {
      const shop = await start();
      const key = crypto.randomUUID();
      const { trpc, sent } = clientOf(shop.url);
      await trpc.charge.mutate({ amount: 1 }, { context: { idempotencyKey: key } });

      const error = await rejection(trpc.charge.mutate({ amount: 2 }, { context: { idempotencyKey: key } }));

      expect(error.data).toMatchObject({
        httpStatus: 422,
        code: 'UNPROCESSABLE_CONTENT',
        idempotency: { code: 'idempotency_key_reused' },
      });
      expect(sent).toHaveLength(2);
      expect(shop.calls.charge).toBe(1);
    });

    it('a 400 (invalid input) is passed on at once', async () => {
      const shop = await start();
      const { trpc, sent } = clientOf(shop.url);
      const error = await rejection(trpc.charge.mutate({ amount: -1 }));
      expect(error.data).toMatchObject({ httpStatus: 400, code: 'BAD_REQUEST' });
      expect(sent).toHaveLength(1);
    });

    it('E4: a 500 is the stored outcome: passed on, not retried', async () => {
      const shop = await start();
      const { trpc, sent } = clientOf(shop.url);
      const error = await rejection(trpc.explode.mutate({ amount: 1 }));
      expect(error.data).toMatchObject({ httpStatus: 500, code: 'INTERNAL_SERVER_ERROR' });
      expect(sent).toHaveLength(1);
      expect(shop.calls.explode).toBe(1);
    });

    it("E4: the resolver's own CONFLICT is retried once at most: its replay is the stored outcome and ends the retries", async () => {
      const shop = await start();
      const { trpc, sent } = clientOf(shop.url);
      const error = await rejection(trpc.reserveName.mutate({ name: 'ada' }));
      expect(error.message).toBe('that name is taken');
      expect(sent.map((s) => [s.status, s.replayed])).toEqual([
        [409, false],
        [409, true],
      ]);
      expect(shop.calls.reserveName).toBe(1);
    });
  });

  describe('resumable failures (E8)', () => {
    it('E8: a failure marked resumable is retried with the same key, and the retry completes the work', async () => {
      const shop = await start();
      const notices: RetryNotice[] = [];
      const { trpc, sent } = clientOf(shop.url, { onRetry: (notice) => notices.push(notice) });

      await expect(trpc.resumableCharge.mutate({ amount: 14 })).resolves.toEqual({
        charge: 'ch_resumed_2',
        amount: 14,
      });
      expect(notices.map((notice) => notice.reason)).toEqual(['resumable']);
      expect(sent.map((s) => [s.status, s.replayed])).toEqual([
        [500, false],
        [200, false],
      ]);
      expect(new Set(sent.map((s) => s.key)).size).toBe(1);
      expect(shop.calls.resumableCharge).toBe(2);
    });

    it('E8: a batched call is retried on its own data.idempotentResumable (no header speaks for a batch); the other call is answered once', async () => {
      const shop = await start();
      const notices: RetryNotice[] = [];
      const { trpc, sent } = clientOf(shop.url, {
        batch: true,
        key: { header: false },
        onRetry: (notice) => notices.push(notice),
      });
      const [charged, resumed] = await Promise.all([
        trpc.chargeByInput.mutate({ amount: 1 }),
        trpc.resumableByInput.mutate({ amount: 2 }),
      ]);
      expect(charged).toEqual({ charge: 'ch_input_1', amount: 1 });
      expect(resumed).toEqual({ charge: 'ch_resumed_input_2', amount: 2 });
      expect(notices.map((notice) => notice.reason)).toEqual(['resumable']);
      // The first batch held both calls; the retry only the resumable one, with its key.
      expect(sent.map((s) => (Array.isArray(s.body) ? s.body.length : Object.keys(s.body).length))).toEqual([2, 1]);
      expect(sent[1]!.body['0'].idempotencyKey).toBe(sent[0]!.body['1'].idempotencyKey);
      expect(shop.calls).toMatchObject({ chargeByInput: 1, resumableByInput: 2 });
    });

    it('E8: gives up after maxAttempts resumable failures with RetriesExhaustedError, every attempt with one key', async () => {
      const shop = await start();
      shop.failures.resumableCharge = 5;
      const { trpc, sent } = clientOf(shop.url, { maxAttempts: 3, initialDelayMs: 1 });
      const error = await rejection(trpc.resumableCharge.mutate({ amount: 3 }));
      expect(error.cause).toBeInstanceOf(RetriesExhaustedError);
      expect(sent.map((s) => s.status)).toEqual([500, 500, 500]);
      expect(new Set(sent.map((s) => s.key)).size).toBe(1);
      expect(shop.calls.resumableCharge).toBe(3);
    });

    it('E8: a final failure of a resume procedure (a 4xx) is not retried, and its replay is the stored outcome', async () => {
      const shop = await start();
      const { trpc, sent } = clientOf(shop.url);
      const error = await rejection(trpc.declinedCharge.mutate({ amount: 1 }));
      expect(error.message).toBe('card declined');
      expect(error.data?.idempotentResumable).toBeUndefined();
      expect(sent).toHaveLength(1);
      expect(shop.calls.declinedCharge).toBe(1);
    });
  });

  describe('the retention (R2, R4)', () => {
    it('R2: stops before the published retention ends with RetentionWindowExceededError, instead of a retry the server would run as new', async () => {
      const shop = await start({ retention: '2s' });
      const held = shop.hold();
      const { trpc, sent, faults } = clientOf(shop.url);
      faults.push(dropWhenStarted(held.started));
      const startedAt = Date.now();

      const error = await rejection(trpc.slowCharge.mutate({ amount: 42 }));

      // retention 2 s, safety margin 1 s: the 409's Retry-After (1 s) would land past the deadline.
      expect(error.cause).toBeInstanceOf(RetentionWindowExceededError);
      const exceeded = error.cause as RetentionWindowExceededError;
      expect(exceeded).toMatchObject({
        code: 'idempotency_retention_exceeded',
        retentionMs: 2000,
        attempts: 2,
        key: unquote(sent[0]!.key),
      });
      expect(exceeded.firstAttemptAt).toBeGreaterThanOrEqual(startedAt);
      expect(error.message).toContain('Reconcile');
      expect(sent.map((s) => s.status)).toEqual([undefined, 409]);
      expect(shop.calls.slowCharge).toBe(1);

      // What the link refused to do: past the retention the server recorded, the same key runs again.
      held.release();
      const record = await untilExpired(shop.store, formatScope('slowCharge', sharedPrincipal()), exceeded.key);
      expect(record.expiresAt.getTime() - record.completedAt!.getTime()).toBe(2000);
      const late = await fetch(`${shop.url}/trpc/slowCharge`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': sent[0]!.key! },
        body: '{"amount":42}',
      });
      expect(late.status).toBe(200);
      expect(late.headers.get('idempotent-replayed')).toBeNull();
      expect(shop.calls.slowCharge).toBe(2);
    });

    it('R4: reads the published policy once for every mutation of the client', async () => {
      const shop = await start();
      const { trpc } = clientOf(shop.url);
      await Promise.all([trpc.charge.mutate({ amount: 1 }), trpc.charge.mutate({ amount: 2 })]);
      await expect(trpc.optionalCharge.mutate({ amount: 3 })).resolves.toEqual({ charge: 'ch_opt_1', amount: 3 });
      expect(shop.calls).toMatchObject({ charge: 2, optionalCharge: 1, policy: 1 });
    });

    it('uses a configured retention without reading any policy', async () => {
      const shop = await start();
      const { trpc, faults } = clientOf(shop.url, { retention: '24h', policyUrl: undefined });
      faults.push(loseResponse);
      await expect(trpc.charge.mutate({ amount: 1 })).resolves.toEqual({ charge: 'ch_1', amount: 1 });
      expect(shop.calls.policy).toBe(0);
    });

    it('fails a mutation whose policy cannot be read, before sending it', async () => {
      const shop = await start();
      const { trpc, sent } = clientOf(shop.url, { policyUrl: `${shop.url}/missing-policy` });
      const error = await rejection(trpc.charge.mutate({ amount: 1 }));
      expect(error.message).toContain(
        `[idem] could not read the idempotency policy at ${shop.url}/missing-policy: it answered 404`,
      );
      expect(sent).toHaveLength(0);
      expect(shop.calls.charge).toBe(0);
    });

    it('refuses to be created without a retention or a policy URL', () => {
      expect(() => idempotencyLink({})).toThrow(
        /\[idem\] idempotencyLink needs to know how long the server keeps keys/,
      );
    });
  });

  it('gives up after maxAttempts with RetriesExhaustedError; resuming its key and first attempt later gets the replay', async () => {
    const shop = await start();
    const { trpc, sent, faults } = clientOf(shop.url, { maxAttempts: 2 });
    faults.push(loseResponse, loseResponse);

    const error = await rejection(trpc.charge.mutate({ amount: 9 }));
    expect(error.cause).toBeInstanceOf(RetriesExhaustedError);
    const exhausted = error.cause as RetriesExhaustedError;
    expect(exhausted).toMatchObject({ code: 'idempotency_retries_exhausted', attempts: 2, key: unquote(sent[0]!.key) });

    const resumed = await trpc.charge.mutate(
      { amount: 9 },
      { context: { idempotencyKey: exhausted.key, idempotencyFirstAttemptAt: exhausted.firstAttemptAt } },
    );
    expect(resumed).toEqual({ charge: 'ch_1', amount: 9 });
    expect(sent.at(-1)).toMatchObject({ key: sent[0]!.key, replayed: true });
    expect(shop.calls.charge).toBe(1);
  });

  it("stops when the caller's signal aborts, without another attempt", async () => {
    const shop = await start();
    const controller = new AbortController();
    const { trpc, sent, faults } = clientOf(shop.url, { onRetry: () => controller.abort() });
    faults.push(loseResponse);
    const error = await rejection(trpc.charge.mutate({ amount: 1 }, { signal: controller.signal }));
    expect(error.cause).toMatchObject({ name: 'AbortError' });
    expect(sent).toHaveLength(1);
  });

  it('leaves queries untouched: no key, no retry', async () => {
    const shop = await start();
    const { trpc, sent, faults } = clientOf(shop.url);
    await expect(trpc.sawKey.query()).resolves.toBe(false);
    faults.push(loseResponse);
    await expect(trpc.sawKey.query()).rejects.toThrow('fetch failed');
    expect(sent.map((s) => s.key)).toEqual([null, null]);
  });

  it('does not retry when the header was never sent (no idempotencyHeaders in httpLink): a retry could execute again', async () => {
    const shop = await start();
    const { trpc, sent, faults } = clientOf(shop.url, { noHeaders: true });
    faults.push(loseResponse);
    const error = await rejection(trpc.optionalCharge.mutate({ amount: 1 }));
    expect(error.message).toMatch(
      /^\[idem\] optionalCharge failed and was not retried: its Idempotency-Key header was never sent/,
    );
    expect(sent).toHaveLength(1);
    expect(shop.calls.optionalCharge).toBe(1);
  });

  describe('input-field keys (key: { header: false })', () => {
    it('K4: each call of a batch carries its own key in the input, kept across a retry', async () => {
      const shop = await start();
      const { trpc, sent, faults } = clientOf(shop.url, { key: { header: false }, batch: true });
      faults.push(loseResponse);

      const results = await Promise.all([
        trpc.chargeByInput.mutate({ amount: 1 }),
        trpc.chargeByInput.mutate({ amount: 2 }),
      ]);

      expect(results.map((r) => r.amount)).toEqual([1, 2]);
      const [batch, ...retries] = sent;
      expect(batch!.key).toBeNull();
      const keys = [batch!.body['0'].idempotencyKey, batch!.body['1'].idempotencyKey];
      expect(keys[0]).toMatch(UUID);
      expect(keys[1]).toMatch(UUID);
      expect(keys[0]).not.toBe(keys[1]);
      const retried = retries.flatMap((request) =>
        Object.values(request.body as Record<string, { idempotencyKey: string }>).map((input) => input.idempotencyKey),
      );
      expect(retried.sort()).toEqual([...keys].sort());
      expect(retries.every((request) => request.replayed)).toBe(true);
      expect(shop.calls.chargeByInput).toBe(2);
    });

    it("keeps a key the caller put in the input, and leaves the caller's input object as it was", async () => {
      const shop = await start();
      const { trpc, sent } = clientOf(shop.url, { key: { header: false } });
      const input = { amount: 3, idempotencyKey: 'order-3-attempt' };
      await trpc.chargeByInput.mutate(input);
      expect(sent[0]!.body).toEqual({ amount: 3, idempotencyKey: 'order-3-attempt' });

      const fresh = { amount: 4 };
      await trpc.chargeByInput.mutate(fresh);
      expect(fresh).toEqual({ amount: 4 });
    });

    it('refuses an input that is not an object, before sending anything', async () => {
      const shop = await start();
      const { trpc, sent } = clientOf(shop.url, { key: { header: false } });
      const error = await rejection(trpc.echoByInput.mutate('not an object'));
      expect(error.message).toMatch(
        /^\[idem\] idempotencyLink puts the key in the input field `idempotencyKey`, so the input of echoByInput must be an object; got string/,
      );
      expect(sent).toHaveLength(0);
    });
  });
});

describe('retry layers around idempotencyLink (generated)', () => {
  /** One arrangement: tRPC retryLinks above and below idem's link, a caller's loop, a terminating link, lost answers. */
  const arrangement = fc.record({
    outside: fc.integer({ min: 0, max: 2 }),
    inside: fc.boolean(),
    callerRetries: fc.integer({ min: 0, max: 2 }),
    terminating: fc.constantFrom('httpLink', 'httpBatchLink', 'httpBatchStreamLink'),
    maxAttempts: fc.integer({ min: 1, max: 3 }),
    losses: fc.integer({ min: 0, max: 6 }),
  });

  it('E2, K1: whatever retries the mutation, every request carries one key and the resolver runs at most once; an answer is the first charge', async () => {
    const shop = await start();
    let amount = 0;
    await fc.assert(
      fc.asyncProperty(arrangement, async ({ outside, inside, callerRetries, terminating, maxAttempts, losses }) => {
        amount += 1;
        const network = wire();
        for (let i = 0; i < losses; i++) network.faults.push(loseResponse);
        const header = terminating === 'httpLink';
        const url = `${shop.url}/trpc`;
        const end: TRPCLink<ShopRouter> =
          terminating === 'httpLink'
            ? httpLink({ url, fetch: network.fetch, headers: ({ op }) => idempotencyHeaders(op) })
            : terminating === 'httpBatchLink'
              ? httpBatchLink({ url, fetch: network.fetch })
              : httpBatchStreamLink({ url, fetch: network.fetch });
        const retrying = () =>
          retryLink<ShopRouter>({ retry: ({ error, attempts }) => !error.data && attempts < 3, retryDelayMs: () => 0 });
        const link = idempotencyLink<ShopRouter>({
          retention: '24h',
          maxAttempts,
          initialDelayMs: 1,
          ...(header ? {} : { key: { header: false } }),
        });
        const trpc = createTRPCClient<ShopRouter>({
          links: [...Array.from({ length: outside }, retrying), link, ...(inside ? [retrying()] : []), end],
        });
        const before = header ? shop.calls.charge : shop.calls.chargeByInput;
        let answer: { charge: string } | undefined;
        for (let call = 0; call <= callerRetries && !answer; call++) {
          try {
            answer = header ? await trpc.charge.mutate({ amount }) : await trpc.chargeByInput.mutate({ amount });
          } catch (error) {
            // Only an unresolved outcome may end the loop here: the server never answered.
            expect((error as TRPCClientError<ShopRouter>).cause).toBeInstanceOf(UnresolvedOperationError);
          }
        }

        const keys = new Set(
          network.sent.map((request) =>
            header
              ? unquote(request.key)
              : (request.body as Record<string, { idempotencyKey?: string }>)['0']?.idempotencyKey,
          ),
        );
        expect(keys.size).toBe(1);
        const runs = (header ? shop.calls.charge : shop.calls.chargeByInput) - before;
        expect(runs).toBe(network.sent.length > 0 ? 1 : 0);
        // The resolver numbers its charges: an answer is the one charge it made.
        if (answer) expect(answer).toEqual({ charge: `ch_${header ? '' : 'input_'}${before + 1}`, amount });
      }),
      { seed: 20_261_201, numRuns: 40, interruptAfterTimeLimit: 60_000, markInterruptAsFailure: true },
    );
  }, 120_000);
});
