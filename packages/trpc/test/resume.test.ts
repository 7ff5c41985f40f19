/**
 * Black-box (E8): procedures with `onFailure: 'resume'` over a real tRPC server on 127.0.0.1,
 * called with raw HTTP and `@trpc/client`, once per store. A payment is two steps, `reserve` then `charge`; the
 * provider fails the first charge of each key (a timeout: 500), succeeds on the next. Side effects
 * are counted per key.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initTRPC, TRPCError, type AnyTRPCRouter } from '@trpc/server';
import { createTRPCClient, httpLink } from '@trpc/client';
import { z } from 'zod';
import { createPolicyDocument, MemoryStore, type IdempotencyStore } from '@idem/core';
import {
  finalFailure,
  idempotency,
  idempotencyClaim,
  idempotencyErrorFormatter,
  type IdempotencyContext,
} from '../src/index.ts';
import { clientFor, mutate, newKey, startStandalone, type RunningServer } from './http.ts';
import { storeTargets } from './stores.ts';
import { idempotencyHeaders, idempotencyLink, type RetryNotice } from '../src/link.ts';

interface Context extends IdempotencyContext {
  user: string;
  deny: boolean;
}

function createPayments(store: IdempotencyStore) {
  const reservations = new Map<string, number>();
  const chargeAttempts = new Map<string, number>();
  const charges = new Map<string, number>();
  const bump = (map: Map<string, number>, key: string) => {
    const count = (map.get(key) ?? 0) + 1;
    map.set(key, count);
    return count;
  };
  const t = initTRPC.context<Context>().create({ errorFormatter: idempotencyErrorFormatter, isDev: false });
  const principal = (ctx: Context) => ctx.user;
  const resume = idempotency({ store, principal, onFailure: 'resume' });
  const replay = idempotency({ store, principal });
  const resumeByInput = idempotency({ store, principal, onFailure: 'resume', key: { header: false } });
  const payment = z.object({ amount: z.number().int().positive() });

  /** Two steps under the claim; the provider times out on the first charge of each step key. */
  async function pay(ctx: object, amount: number) {
    const claim = idempotencyClaim(ctx)!;
    const reservation = await claim.step('reserve', (stepKey) => {
      bump(reservations, stepKey);
      return `res_${stepKey.slice(-6)}`;
    });
    const charge = await claim.step('charge', (stepKey) => {
      if (bump(chargeAttempts, stepKey) === 1) throw new Error('provider timeout');
      bump(charges, stepKey);
      return `ch_${stepKey.slice(-6)}`;
    });
    return { reservation, charge, amount, attempt: claim.attempt };
  }

  const router = t.router({
    pay: t.procedure
      .input(payment)
      .use(resume)
      .mutation(({ ctx, input }) => pay(ctx, input.amount)),
    payByInput: t.procedure
      .input(payment.extend({ idempotencyKey: z.string() }))
      .use(resumeByInput)
      .mutation(({ ctx, input }) => pay(ctx, input.amount)),
    payV1: t.procedure
      .input(payment)
      .use(replay)
      .mutation(({ ctx, input }) => pay(ctx, input.amount)),
    decline: t.procedure
      .input(payment)
      .use(resume)
      .mutation(({ ctx }): never => {
        bump(charges, `decline ${idempotencyClaim(ctx)!.key}`);
        throw new TRPCError({ code: 'PRECONDITION_FAILED', message: 'card declined' });
      }),
    fraud: t.procedure
      .input(payment)
      .use(resume)
      .mutation(({ ctx }): never => {
        bump(charges, `fraud ${idempotencyClaim(ctx)!.key}`);
        throw finalFailure(new Error('flagged as fraud: never retry'));
      }),
    outage: t.procedure
      .input(payment)
      .use(resume)
      .mutation(({ ctx }): never => {
        bump(charges, `outage ${idempotencyClaim(ctx)!.key}`);
        throw finalFailure(new TRPCError({ code: 'SERVICE_UNAVAILABLE', message: 'closed for good' }));
      }),
  });
  const count = (map: Map<string, number>) => [...map.values()].reduce((sum, n) => sum + n, 0);
  return {
    router,
    reservations: () => count(reservations),
    chargeAttempts: () => count(chargeAttempts),
    charges: () => count(charges),
    resume,
    replay,
  };
}

describe.each(storeTargets)('@idem/trpc with onFailure: resume (E8) on $name', (target) => {
  let payments: ReturnType<typeof createPayments>;
  let server: RunningServer;
  let url: string;
  let closeStore: () => Promise<void>;

  beforeAll(async () => {
    const opened = await target.open();
    closeStore = opened.close;
    payments = createPayments(opened.store);
    server = await startStandalone(payments.router);
    url = server.url;
  });
  afterAll(async () => {
    await server?.close();
    await closeStore?.();
  });

  it('E8/R4: each procedure is published with its onFailure, and resume keeps keys 30 days by default; replay 24 hours', () => {
    expect(payments.resume.describeEndpoint('pay')).toMatchObject({
      transport: 'trpc',
      operation: 'pay',
      endpoint: 'tRPC mutation pay',
      keySources: ['Idempotency-Key header', 'input field idempotencyKey'],
      required: true,
      onFailure: 'resume',
      retentionMs: 30 * 86_400_000,
    });
    expect(payments.replay.describeEndpoint('payV1')).toMatchObject({ onFailure: 'replay', retentionMs: 86_400_000 });
    const document = createPolicyDocument({
      documentationUrl: '/idempotency',
      endpoints: [payments.resume.describeEndpoint('pay'), payments.replay.describeEndpoint('payV1')],
    });
    expect(document.endpoints.map((endpoint) => [endpoint.operation, endpoint.onFailure, endpoint.retention])).toEqual([
      ['pay', 'resume', '30d'],
      ['payV1', 'replay', '24h'],
    ]);
  });

  it('E8: a failure after the start is marked resumable; the retry completes it, skipping the step done; a later retry replays', async () => {
    const headers = { 'idempotency-key': newKey() };
    const before = { reservations: payments.reservations(), charges: payments.charges() };

    const first = await mutate(url, 'pay', { amount: 14 }, headers);
    expect(first.status).toBe(500);
    expect(first.headers.get('idempotent-resumable')).toBe('true');
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    expect(first.body.error).toMatchObject({
      message: 'provider timeout',
      data: { code: 'INTERNAL_SERVER_ERROR', idempotentResumable: true },
    });

    const retry = await mutate(url, 'pay', { amount: 14 }, headers);
    expect(retry.status).toBe(200);
    expect(retry.headers.get('idempotent-resumable')).toBeNull();
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
    expect(retry.body.result.data).toMatchObject({ amount: 14, attempt: 2 });

    const again = await mutate(url, 'pay', { amount: 14 }, headers);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.headers.get('idempotent-resumable')).toBeNull();
    expect(again.body).toEqual(retry.body);

    // One reservation (the retry skipped it) and one charge for the payment.
    expect(payments.reservations() - before.reservations).toBe(1);
    expect(payments.charges() - before.charges).toBe(1);
  });

  it('E8/F3: another input on a resumable key is refused with 422 and runs nothing', async () => {
    const headers = { 'idempotency-key': newKey() };
    const first = await mutate(url, 'pay', { amount: 14 }, headers);
    expect(first.headers.get('idempotent-resumable')).toBe('true');
    const reservations = payments.reservations();

    const other = await mutate(url, 'pay', { amount: 15 }, headers);
    expect(other.status).toBe(422);
    expect(other.body.error.data).toMatchObject({ idempotency: { code: 'idempotency_key_reused' } });
    expect(payments.reservations()).toBe(reservations);
  });

  it.each([
    ['decline', 'a 4xx TRPCError', 412, 'PRECONDITION_FAILED', 'card declined'],
    ['fraud', 'an error thrown as finalFailure(error)', 500, 'INTERNAL_SERVER_ERROR', 'flagged as fraud: never retry'],
    ['outage', 'a 5xx TRPCError thrown as finalFailure(error)', 503, 'SERVICE_UNAVAILABLE', 'closed for good'],
  ])(
    'E8/E4: under resume, %s (%s) is final: stored, replayed, never marked resumable',
    async (path, _what, status, code, message) => {
      const headers = { 'idempotency-key': newKey() };
      const before = payments.charges();
      const first = await mutate(url, path, { amount: 1 }, headers);
      expect(first.status).toBe(status);
      expect(first.body.error).toMatchObject({ message, data: { code } });
      expect(first.body.error.data.idempotentResumable).toBeUndefined();
      expect(first.headers.get('idempotent-resumable')).toBeNull();

      const replay = await mutate(url, path, { amount: 1 }, headers);
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(replay.body).toEqual(first.body);
      expect(payments.charges() - before).toBe(1);
    },
  );

  it('E4: a replay endpoint is unchanged: its failure is stored and replayed, without the resumable marker', async () => {
    const headers = { 'idempotency-key': newKey() };
    const attempts = payments.chargeAttempts();
    const first = await mutate(url, 'payV1', { amount: 14 }, headers);
    expect(first.status).toBe(500);
    expect(first.headers.get('idempotent-resumable')).toBeNull();
    expect(first.body.error.data.idempotentResumable).toBeUndefined();

    const replay = await mutate(url, 'payV1', { amount: 14 }, headers);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body).toEqual(first.body);
    expect(payments.chargeAttempts() - attempts).toBe(1);
  });

  it('E8: in a batch, each resumable call is marked in its own error.data, and no header speaks for the batch', async () => {
    const { trpc, lastHeaders } = clientFor<typeof payments.router>(url, { link: 'batch' });
    const keys = [newKey(), newKey()];
    const send = () =>
      Promise.allSettled(keys.map((idempotencyKey) => trpc.payByInput.mutate({ amount: 14, idempotencyKey })));
    const first = await send();
    for (const answer of first) {
      expect(answer.status).toBe('rejected');
      expect((answer as PromiseRejectedResult).reason.data).toMatchObject({
        idempotentResumable: true,
        code: 'INTERNAL_SERVER_ERROR',
      });
    }
    expect(lastHeaders().get('idempotent-resumable')).toBeNull();

    const retry = await send();
    expect(retry.map((answer) => answer.status)).toEqual(['fulfilled', 'fulfilled']);
    expect((retry[0] as PromiseFulfilledResult<unknown>).value).toMatchObject({ amount: 14, attempt: 2 });
  });

  it('E8: over a stream (httpBatchStreamLink), whose headers leave before the call runs, the call is marked in error.data', async () => {
    const { trpc, lastHeaders } = clientFor<typeof payments.router>(url, { link: 'stream', key: newKey() });
    const error = await trpc.pay.mutate({ amount: 14 }).then(
      () => undefined,
      (e: unknown) => e as { data?: Record<string, unknown> },
    );
    expect(error?.data).toMatchObject({ idempotentResumable: true });
    expect(lastHeaders().get('idempotent-resumable')).toBeNull();
    await expect(trpc.pay.mutate({ amount: 14 })).resolves.toMatchObject({ amount: 14, attempt: 2 });
  });

  it('E8: a batch of one call carries the header too: it speaks for that call alone', async () => {
    const { trpc, lastHeaders } = clientFor<typeof payments.router>(url, { link: 'batch', key: newKey() });
    const error = await trpc.pay.mutate({ amount: 14 }).then(
      () => undefined,
      (e: unknown) => e as { data?: Record<string, unknown> },
    );
    expect(error?.data).toMatchObject({ idempotentResumable: true });
    expect(lastHeaders().get('idempotent-resumable')).toBe('true');
    await expect(trpc.pay.mutate({ amount: 14 })).resolves.toMatchObject({ amount: 14, attempt: 2 });
  });
});

describe('idempotencyLink against a server without idempotencyErrorFormatter (E8)', () => {
  let server: RunningServer;
  let runs = 0;
  beforeAll(async () => {
    // tRPC's default error shape: no data.idempotentResumable, so the link has only the header.
    const t = initTRPC.context<Context>().create({ isDev: false });
    const resume = idempotency({
      store: new MemoryStore(),
      principal: (ctx: Context) => ctx.user,
      onFailure: 'resume',
    });
    const router = t.router({
      pay: t.procedure
        .input(z.object({ amount: z.number() }))
        .use(resume)
        .mutation(({ input }) => {
          runs += 1;
          if (runs === 1) throw new Error('provider timeout');
          return { amount: input.amount, runs };
        }),
    });
    server = await startStandalone(router);
  });
  afterAll(() => server?.close());

  it('E8: a lone call marked only by Idempotent-Resumable is retried with the same key and completes', async () => {
    const keys: Array<string | null> = [];
    const notices: RetryNotice[] = [];
    const trpc = createTRPCClient<AnyTRPCRouter>({
      links: [
        idempotencyLink({ retention: '30d', initialDelayMs: 1, onRetry: (notice) => notices.push(notice) }),
        httpLink({
          url: server.url,
          headers: ({ op }) => idempotencyHeaders(op),
          fetch: async (input, init) => {
            keys.push(new Headers(init?.headers).get('idempotency-key'));
            return fetch(input, init);
          },
        }),
      ],
    });
    const answer = await (trpc as unknown as { pay: { mutate(input: unknown): Promise<unknown> } }).pay.mutate({
      amount: 5,
    });
    expect(answer).toEqual({ amount: 5, runs: 2 });
    expect(notices.map((notice) => notice.reason)).toEqual(['resumable']);
    expect(keys).toHaveLength(2);
    expect(keys[1]).toBe(keys[0]);
  });
});
