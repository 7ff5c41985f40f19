/**
 * Black-box: a real tRPC server on 127.0.0.1, called with `@trpc/client` and raw HTTP, once
 * per store.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { TRPCClientError } from '@trpc/client';
import superjson from 'superjson';
import type { IdempotencyStore } from '@idem/core';
import { createSuperjsonApp, createTestApp, type AppRouter, type SuperjsonRouter } from './app.ts';
import { clientFor, fetchAdapter, mutate, newKey, startExpress, startStandalone, type RunningServer } from './http.ts';
import { storeTargets } from './stores.ts';

async function rejection(promise: Promise<unknown>): Promise<TRPCClientError<AppRouter>> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  if (!(error instanceof TRPCClientError)) throw new Error(`expected a TRPCClientError, got ${String(error)}`);
  return error as TRPCClientError<AppRouter>;
}

describe.each(storeTargets)('@idem/trpc over HTTP on $name', (target) => {
  let store: IdempotencyStore;
  let closeStore: () => Promise<void>;
  let app: ReturnType<typeof createTestApp>;
  let server: RunningServer;
  let url: string;

  beforeAll(async () => {
    ({ store, close: closeStore } = await target.open());
    app = createTestApp(store);
    server = await startStandalone(app.router);
    url = server.url;
  });
  afterAll(async () => {
    await server?.close();
    await closeStore?.();
  });
  beforeEach(() => app.resetCalls());

  describe('replay', () => {
    it('E2: replays the stored output with Idempotent-Replayed: true and does not run the resolver again', async () => {
      const { trpc, lastHeaders } = clientFor<AppRouter>(url, { key: newKey() });
      const first = await trpc.createOrder.mutate({ amount: 42 });
      expect(lastHeaders().get('idempotent-replayed')).toBeNull();
      const second = await trpc.createOrder.mutate({ amount: 42 });
      expect(second).toEqual(first);
      expect(lastHeaders().get('idempotent-replayed')).toBe('true');
      expect(app.calls.createOrder).toBe(1);
    });

    it('K1: a quoted sf-string key and the same bare key are one key', async () => {
      const key = newKey();
      const first = await mutate(url, 'createOrder', { amount: 7 }, { 'idempotency-key': `"${key}"` });
      const second = await mutate(url, 'createOrder', { amount: 7 }, { 'idempotency-key': `  ${key} ` });
      expect(second.body).toEqual(first.body);
      expect(second.headers.get('idempotent-replayed')).toBe('true');
      expect(app.calls.createOrder).toBe(1);
    });

    it.each([
      [
        'failingOrder',
        'a plain throw (INTERNAL_SERVER_ERROR)',
        500,
        'INTERNAL_SERVER_ERROR',
        'payment channel exploded',
      ],
      ['refusedOrder', 'a TRPCError', 412, 'PRECONDITION_FAILED', 'card declined'],
    ])(
      'E4: replays %s, %s, with the same code, message and HTTP status, without running it again',
      async (path, _what, status, code, message) => {
        const headers = { 'idempotency-key': newKey() };
        const first = await mutate(url, path, { amount: 1 }, headers);
        expect(first.status).toBe(status);
        expect(first.body.error).toMatchObject({ message, data: { code, httpStatus: status, path } });
        expect(first.headers.get('idempotent-replayed')).toBeNull();

        const replay = await mutate(url, path, { amount: 1 }, headers);
        expect(replay.status).toBe(status);
        expect(replay.body).toEqual(first.body);
        expect(replay.headers.get('idempotent-replayed')).toBe('true');
        expect(app.calls[path]).toBe(1);
      },
    );

    it('E4: the client sees a replayed error exactly as the first one (TRPCClientError code, message, status)', async () => {
      const { trpc } = clientFor<AppRouter>(url, { key: newKey() });
      const first = await rejection(trpc.failingOrder.mutate({ amount: 3 }));
      const replay = await rejection(trpc.failingOrder.mutate({ amount: 3 }));
      expect([replay.message, replay.data?.code, replay.data?.httpStatus]).toEqual([
        first.message,
        first.data?.code,
        first.data?.httpStatus,
      ]);
      expect(first.data?.code).toBe('INTERNAL_SERVER_ERROR');
      expect(app.calls.failingOrder).toBe(1);
    });
  });

  describe('conflicts and mismatches', () => {
    it('E1/E3: concurrent calls to a slow resolver run it once; the others get 409 CONFLICT with Retry-After', async () => {
      const hold = app.holdSlowOrders();
      const headers = { 'idempotency-key': newKey() };
      let settled = 0;
      const requests = Array.from({ length: 5 }, () =>
        mutate(url, 'slowOrder', { amount: 5 }, headers).finally(() => (settled += 1)),
      );
      try {
        await hold.started;
        await vi.waitFor(() => expect(settled).toBe(4), { timeout: 5000 });
      } finally {
        hold.release();
      }
      const responses = await Promise.all(requests);
      const conflicts = responses.filter((response) => response.status === 409);
      expect(responses.map((response) => response.status).sort()).toEqual([200, 409, 409, 409, 409]);
      for (const conflict of conflicts) {
        expect(conflict.headers.get('retry-after')).toBe('1');
        expect(conflict.body.error.data).toMatchObject({
          code: 'CONFLICT',
          httpStatus: 409,
          idempotency: {
            code: 'idempotency_request_in_progress',
            status: 409,
            retryAfter: 1,
            type: `${url}/idempotency#idempotency_request_in_progress`,
          },
        });
      }
      expect(app.calls.slowOrder).toBe(1);

      const retry = await mutate(url, 'slowOrder', { amount: 5 }, headers);
      expect(retry.status).toBe(200);
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(retry.body).toEqual(responses.find((response) => response.status === 200)!.body);
      expect(app.calls.slowOrder).toBe(1);
    });

    it('F3: the same key with another input gets 422 UNPROCESSABLE_CONTENT, runs nothing and leaves the record as it was', async () => {
      const headers = { 'idempotency-key': newKey() };
      const original = await mutate(url, 'createOrder', { amount: 10 }, headers);
      const changed = await mutate(url, 'createOrder', { amount: 11 }, headers);
      expect(changed.status).toBe(422);
      expect(changed.body.error.data).toMatchObject({
        code: 'UNPROCESSABLE_CONTENT',
        idempotency: { code: 'idempotency_key_reused', status: 422 },
      });
      expect(changed.headers.get('idempotent-replayed')).toBeNull();
      const retried = await mutate(url, 'createOrder', { amount: 10 }, headers);
      expect(retried.body).toEqual(original.body);
      expect(app.calls.createOrder).toBe(1);
    });

    it('F1: the fingerprint ignores the order of input fields', async () => {
      const headers = { 'idempotency-key': newKey() };
      const first = await mutate(url, 'createOrder', { amount: 10, note: 'gift' }, headers);
      const second = await mutate(url, 'createOrder', { note: 'gift', amount: 10 }, headers);
      expect(second.status).toBe(200);
      expect(second.body).toEqual(first.body);
      expect(app.calls.createOrder).toBe(1);
    });
  });

  describe('keys', () => {
    it.each([
      ['missing', undefined, 'idempotency_key_missing'],
      ['empty', '   ', 'idempotency_key_missing'],
      ['256 characters long', 'k'.repeat(256), 'idempotency_key_invalid'],
      ['holding a space', 'bad key', 'idempotency_key_invalid'],
      ['holding a backslash', 'bad\\key', 'idempotency_key_invalid'],
    ])(
      'K2/K3: a key %s gets 400 BAD_REQUEST with the problem fields, and the resolver does not run',
      async (_what, key, code) => {
        const response = await mutate(
          url,
          'createOrder',
          { amount: 1 },
          key === undefined ? {} : { 'idempotency-key': key },
        );
        expect(response.status).toBe(400);
        expect(response.body.error.data).toMatchObject({ code: 'BAD_REQUEST', httpStatus: 400 });
        const { idempotency } = response.body.error.data;
        expect(idempotency).toMatchObject({ code, status: 400, type: `${url}/idempotency#${code}` });
        expect(idempotency.title).toEqual(expect.any(String));
        expect(idempotency.detail).toBe(response.body.error.message);
        expect(app.calls.createOrder).toBeUndefined();
      },
    );

    it('K3: a key of exactly 255 characters is accepted', async () => {
      const response = await mutate(
        url,
        'createOrder',
        { amount: 1 },
        { 'idempotency-key': 'k'.repeat(254) + newKey().slice(-1) },
      );
      expect(response.status).toBe(200);
      expect(app.calls.createOrder).toBe(1);
    });

    it('K2: an optional-key procedure without a key runs every time, and replays with a key', async () => {
      const anonymous = clientFor<AppRouter>(url);
      await anonymous.trpc.optionalOrder.mutate({ amount: 1 });
      await anonymous.trpc.optionalOrder.mutate({ amount: 1 });
      expect(app.calls.optionalOrder).toBe(2);
      const keyed = clientFor<AppRouter>(url, { key: newKey() });
      const first = await keyed.trpc.optionalOrder.mutate({ amount: 1 });
      expect(await keyed.trpc.optionalOrder.mutate({ amount: 1 })).toEqual(first);
      expect(app.calls.optionalOrder).toBe(3);
    });

    it('K4: an input-field key replays per key, without any header', async () => {
      const { trpc, lastHeaders } = clientFor<AppRouter>(url);
      const idempotencyKey = newKey();
      const first = await trpc.keyedOrder.mutate({ amount: 3, idempotencyKey });
      const second = await trpc.keyedOrder.mutate({ amount: 3, idempotencyKey });
      expect(second).toEqual(first);
      expect(lastHeaders().get('idempotent-replayed')).toBe('true');
      const other = await trpc.keyedOrder.mutate({ amount: 3, idempotencyKey: newKey() });
      expect(other).not.toEqual(first);
      expect(app.calls.keyedOrder).toBe(2);
    });

    it('K4: an input-field key that breaks K3 gets 400 idempotency_key_invalid', async () => {
      const { trpc } = clientFor<AppRouter>(url);
      const error = await rejection(trpc.keyedOrder.mutate({ amount: 3, idempotencyKey: 'x'.repeat(300) }));
      expect(error.data).toMatchObject({ code: 'BAD_REQUEST', idempotency: { code: 'idempotency_key_invalid' } });
      expect(app.calls.keyedOrder).toBeUndefined();
    });

    it('K4: header and input field both sent and different get 400 idempotency_key_ambiguous', async () => {
      const { trpc } = clientFor<AppRouter>(url, { key: newKey() });
      const error = await rejection(trpc.eitherOrder.mutate({ amount: 3, idempotencyKey: newKey() }));
      expect(error.data).toMatchObject({ code: 'BAD_REQUEST', httpStatus: 400 });
      // Typed on the client through idempotencyErrorFormatter's return type.
      expect(error.data?.idempotency?.code).toBe('idempotency_key_ambiguous');
      expect(app.calls.eitherOrder).toBeUndefined();
    });

    it('K4/F1: the key field is left out of the fingerprint, so a header retry and an input-field retry of one call are one call', async () => {
      const key = newKey();
      const viaHeader = clientFor<AppRouter>(url, { key });
      const first = await viaHeader.trpc.eitherOrder.mutate({ amount: 8 });
      const viaInput = clientFor<AppRouter>(url);
      expect(await viaInput.trpc.eitherOrder.mutate({ amount: 8, idempotencyKey: key })).toEqual(first);
      expect(await viaHeader.trpc.eitherOrder.mutate({ amount: 8, idempotencyKey: key })).toEqual(first);
      expect(app.calls.eitherOrder).toBe(1);
    });
  });

  describe('what is never stored (E4)', () => {
    it('E4: an input validation error is not stored: the same key then succeeds', async () => {
      const headers = { 'idempotency-key': newKey() };
      const invalid = await mutate(url, 'createOrder', { amount: -1 }, headers);
      expect(invalid.status).toBe(400);
      expect(invalid.body.error.data.idempotency).toBeUndefined();
      const valid = await mutate(url, 'createOrder', { amount: 2 }, headers);
      expect(valid.status).toBe(200);
      expect(valid.headers.get('idempotent-replayed')).toBeNull();
      expect(app.calls.createOrder).toBe(1);
    });

    it('E4: an auth middleware placed before refuses without storing: the same key then succeeds', async () => {
      const key = newKey();
      const refused = await mutate(url, 'createOrder', { amount: 2 }, { 'idempotency-key': key, 'x-deny': '1' });
      expect(refused.status).toBe(401);
      const allowed = await mutate(url, 'createOrder', { amount: 2 }, { 'idempotency-key': key });
      expect(allowed.status).toBe(200);
      expect(allowed.headers.get('idempotent-replayed')).toBeNull();
      expect(app.calls.createOrder).toBe(1);
    });

    it('E4: a resolver that throws notStarted(ctx, error) answers with its error and releases the key', async () => {
      const headers = { 'idempotency-key': newKey() };
      const limited = await mutate(url, 'rateLimitedOrder', { amount: 2 }, headers);
      expect(limited.status).toBe(429);
      expect(limited.body.error).toMatchObject({ message: 'slow down', data: { code: 'TOO_MANY_REQUESTS' } });
      app.state.rateLimited = false;
      const accepted = await mutate(url, 'rateLimitedOrder', { amount: 2 }, headers);
      expect(accepted.status).toBe(200);
      expect(accepted.headers.get('idempotent-replayed')).toBeNull();
      expect(app.calls).toMatchObject({ 'rateLimitedOrder.refused': 1, rateLimitedOrder: 1 });
    });
  });

  describe('scope (S1)', () => {
    it('S1: the same key from another principal is another record, and each principal replays only its own output', async () => {
      const key = newKey();
      const alice = clientFor<AppRouter>(url, { key, user: 'alice' });
      const bob = clientFor<AppRouter>(url, { key, user: 'bob' });
      const aliceOrder = await alice.trpc.createOrder.mutate({ amount: 9 });
      const bobOrder = await bob.trpc.createOrder.mutate({ amount: 9 });
      expect(bobOrder.orderId).not.toBe(aliceOrder.orderId);
      expect(bob.lastHeaders().get('idempotent-replayed')).toBeNull();
      expect(await alice.trpc.createOrder.mutate({ amount: 9 })).toEqual(aliceOrder);
      expect(await bob.trpc.createOrder.mutate({ amount: 9 })).toEqual(bobOrder);
      expect(app.calls.createOrder).toBe(2);
    });

    it('S1: the same key on another procedure is another record', async () => {
      const { trpc } = clientFor<AppRouter>(url, { key: newKey() });
      await trpc.createOrder.mutate({ amount: 4 });
      await trpc.createRefund.mutate({ amount: 4 });
      expect(app.calls).toMatchObject({ createOrder: 1, createRefund: 1 });
    });
  });

  describe('batches (httpBatchLink)', () => {
    it('input-field keys: each call of a batch is its own record and replays its own output', async () => {
      const [k1, k2] = [newKey(), newKey()];
      const { trpc, responses } = clientFor<AppRouter>(url, { link: 'batch' });
      const send = () =>
        Promise.all([
          trpc.keyedOrder.mutate({ amount: 1, idempotencyKey: k1 }),
          trpc.keyedOrder.mutate({ amount: 1, idempotencyKey: k2 }),
        ]);
      const [a, b] = await send();
      expect(responses).toHaveLength(1);
      expect(a.orderId).not.toBe(b.orderId);
      expect(await send()).toEqual([a, b]);
      expect(responses).toHaveLength(2);
      expect(responses[1]!.headers.get('idempotent-replayed')).toBe('true');
      expect(app.calls.keyedOrder).toBe(2);
    });

    it('one header key over two mutation calls in one batch: both are refused with 400 idempotency_key_ambiguous, nothing runs or is stored', async () => {
      const key = newKey();
      const { trpc, responses } = clientFor<AppRouter>(url, { link: 'batch', key });
      const results = await Promise.allSettled([
        trpc.createOrder.mutate({ amount: 1 }),
        trpc.createRefund.mutate({ amount: 1 }),
      ]);
      expect(responses).toHaveLength(1);
      expect(responses[0]!.status).toBe(400);
      for (const result of results) {
        expect(result.status).toBe('rejected');
        const error = (result as PromiseRejectedResult).reason as TRPCClientError<AppRouter>;
        expect(error.data).toMatchObject({ code: 'BAD_REQUEST', idempotency: { code: 'idempotency_key_ambiguous' } });
      }
      expect(app.calls).toEqual({});
      // Nothing was stored: the key still works for one call.
      const single = clientFor<AppRouter>(url, { key });
      await single.trpc.createOrder.mutate({ amount: 1 });
      expect(single.lastHeaders().get('idempotent-replayed')).toBeNull();
      expect(app.calls.createOrder).toBe(1);
    });

    it('one header key with one mutation in a batch is replayed as usual; queries sent alongside run untouched', async () => {
      const { trpc, lastHeaders } = clientFor<AppRouter>(url, { link: 'batch', key: newKey() });
      const [first] = await Promise.all([trpc.createOrder.mutate({ amount: 6 }), trpc.orderCount.query()]);
      const [second] = await Promise.all([trpc.createOrder.mutate({ amount: 6 }), trpc.orderCount.query()]);
      expect(second).toEqual(first);
      expect(app.calls).toEqual({ createOrder: 1, orderCount: 2 });
      await trpc.orderCount.query();
      expect(lastHeaders().get('idempotent-replayed')).toBeNull();
    });
  });

  describe('pass-through', () => {
    it('queries pass through untouched even with a key: they run every time and are never marked replayed', async () => {
      const { trpc, lastHeaders } = clientFor<AppRouter>(url, { key: newKey() });
      await trpc.orderCount.query();
      await trpc.orderCount.query();
      expect(app.calls.orderCount).toBe(2);
      expect(lastHeaders().get('idempotent-replayed')).toBeNull();
    });
  });

  describe('streaming (httpBatchStreamLink)', () => {
    it('E2: a replay over a streamed response returns the stored output; the header is skipped, nothing throws', async () => {
      const { trpc, responses } = clientFor<AppRouter>(url, { link: 'stream', key: newKey() });
      const first = await trpc.lateOrder.mutate({ amount: 12 });
      const replay = await trpc.lateOrder.mutate({ amount: 12 });
      expect(replay).toEqual(first);
      expect(app.calls.lateOrder).toBe(1);
      // The status and headers left before the middleware ran: streaming links cannot carry them.
      expect(responses[1]!.headers.get('idempotent-replayed')).toBeNull();
    });
  });

  describe('serializer', () => {
    let sjServer: RunningServer;
    let sjApp: ReturnType<typeof createSuperjsonApp>;
    beforeAll(async () => {
      sjApp = createSuperjsonApp(store);
      sjServer = await startStandalone(sjApp.router);
    });
    afterAll(() => sjServer?.close());

    it('E2: with superjson as serializer, a Date and a Map output replay as a Date and a Map', async () => {
      const { trpc, lastHeaders } = clientFor<SuperjsonRouter>(sjServer.url, { key: newKey(), transformer: superjson });
      const at = new Date('2026-12-24T09:30:00.000Z');
      const first = await trpc.schedule.mutate({ at });
      const replay = await trpc.schedule.mutate({ at });
      expect(lastHeaders().get('idempotent-replayed')).toBe('true');
      expect(replay.at).toBeInstanceOf(Date);
      expect(replay.scheduledAt).toBeInstanceOf(Date);
      expect(replay.slots).toBeInstanceOf(Map);
      expect(replay).toEqual(first);
      expect(sjApp.calls.schedule).toBe(1);
    });
  });

  describe('other adapters', () => {
    it('fetch adapter: keys are read from the Request and replays set Idempotent-Replayed through resHeaders', async () => {
      const { trpc, lastHeaders } = clientFor<AppRouter>('http://localhost/trpc', {
        key: newKey(),
        fetch: fetchAdapter(app.router),
      });
      const first = await trpc.createOrder.mutate({ amount: 13 });
      expect(await trpc.createOrder.mutate({ amount: 13 })).toEqual(first);
      expect(lastHeaders().get('idempotent-replayed')).toBe('true');
      expect(app.calls.createOrder).toBe(1);

      const missing = await fetchAdapter(app.router)('http://localhost/trpc/createOrder', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ amount: 1 }),
      });
      expect(missing.status).toBe(400);
      expect((await missing.json()).error.data.idempotency.code).toBe('idempotency_key_missing');
    });

    it('fetch adapter: 409 carries Retry-After through resHeaders', async () => {
      const hold = app.holdSlowOrders();
      const call = fetchAdapter(app.router);
      const request = () =>
        call('http://localhost/trpc/slowOrder', {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'idempotency-key': key },
          body: JSON.stringify({ amount: 1 }),
        });
      const key = newKey();
      const first = request();
      try {
        await hold.started;
        const conflict = await request();
        expect(conflict.status).toBe(409);
        expect(conflict.headers.get('retry-after')).toBe('1');
      } finally {
        hold.release();
      }
      expect((await first).status).toBe(200);
    });

    it('Express adapter: replays with the Idempotent-Replayed header', async () => {
      const express = await startExpress(app.router);
      try {
        const { trpc, lastHeaders } = clientFor<AppRouter>(express.url, { key: newKey() });
        const first = await trpc.createOrder.mutate({ amount: 14 });
        expect(await trpc.createOrder.mutate({ amount: 14 })).toEqual(first);
        expect(lastHeaders().get('idempotent-replayed')).toBe('true');
        expect(app.calls.createOrder).toBe(1);
      } finally {
        await express.close();
      }
    });
  });
});
