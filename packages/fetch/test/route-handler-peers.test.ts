/**
 * The behaviour cases of nestarc/idempotency's suites (test/e2e/idempotency.e2e-spec.ts and
 * test/idempotency.interceptor.spec.ts), ported onto `idempotent()` around route handlers of the
 * shape Next.js App Router calls, `(request, { params }) => Response`, on SQLite and PostgreSQL.
 * (The consumer test runs the same wrapper inside a built Next.js app.) Where idem's contract
 * differs on purpose the test says so and cites the rule (docs/spec.md): nestarc deletes the key
 * when the handler throws, idem stores the outcome once the handler started (E4); nestarc keys
 * any method its decorator is on, idem never keys a safe method (GET, HEAD, OPTIONS); nestarc skips
 * binary responses, idem stores bytes and replays them byte for byte (E2); nestarc replays every
 * `x-` header, idem the headers that describe the body and those you list.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatScope, type IdempotencyEvent, type IdempotencyStore } from '@idem/core';
import { idempotencyClaim, idempotent, notStarted, type IdempotentOptions } from '@idem/fetch';
import { Gate, STORE_TARGETS, post, read } from './support.ts';

type RouteContext = { params: Promise<Record<string, string>> };
const noParams: RouteContext = { params: Promise.resolve({}) };
const ORIGIN = 'http://localhost:3000';

describe.each(STORE_TARGETS)('idempotent() route handlers on $name: the cases of nestarc/idempotency', (target) => {
  let store: IdempotencyStore;
  let close: () => Promise<void>;
  beforeAll(async () => ({ store, close } = await target.open()));
  afterAll(() => close());

  const newKey = () => `route-${randomUUID()}`;
  const principal = (request: Request) => request.headers.get('x-account') ?? 'public';
  const options = (more: Partial<IdempotentOptions> = {}): IdempotentOptions => ({ store, principal, ...more });

  /** nestarc's e2e controllers, as route handlers: payments, capture, refund, failing, transfers. */
  function createRoutes(more: Partial<IdempotentOptions> = {}) {
    const calls = { create: 0, refund: 0, fail: 0, transfer: 0, capture: 0 };
    const gate = new Gate();
    const payments = idempotent(async (request: Request) => {
      const { amount } = await request.json();
      calls.create++;
      await gate.pass();
      return Response.json({ id: `pay_${calls.create}`, kind: 'payment', amount }, { status: 201 });
    }, options(more));
    const withHeaders = idempotent(
      async (request: Request) => {
        const { amount } = await request.json();
        calls.create++;
        return Response.json(
          { id: `pay_header_${calls.create}`, amount },
          {
            status: 201,
            headers: { location: `/payments/pay_header_${calls.create}`, 'x-request-id': `req_header_${calls.create}` },
          },
        );
      },
      options({ replayHeaders: ['x-request-id'], ...more }),
    );
    const refund = idempotent(
      async (request: Request) => {
        const { id } = await request.json();
        calls.refund++;
        return Response.json({ refundId: `rfd_${calls.refund}`, paymentId: id }, { status: 202 });
      },
      options({ retention: '300s', ...more }),
    );
    const capture = idempotent(async (request: Request, { params }: RouteContext) => {
      const { id } = await params;
      const { amount } = await request.json();
      calls.capture++;
      return Response.json({ id: `cap_${calls.capture}`, of: id, amount }, { status: 201 });
    }, options(more));
    const failing = idempotent(async () => {
      calls.fail++;
      if (calls.fail < 2) throw new Error('intentional failure');
      return Response.json({ ok: true, attempt: calls.fail }, { status: 201 });
    }, options(more));
    const transfers = idempotent(async (request: Request) => {
      const { amount } = await request.json();
      calls.transfer++;
      return Response.json({ id: `tr_${calls.transfer}`, kind: 'transfer', amount }, { status: 201 });
    }, options(more));
    return { calls, gate, payments, withHeaders, refund, capture, failing, transfers };
  }

  const send = (
    route: (request: Request, context: RouteContext) => Promise<Response>,
    path: string,
    init: Parameters<typeof post>[1] = {},
    context: RouteContext = noParams,
  ) => route(post(`${ORIGIN}${path}`, init), context).then(read);

  it('E1: a first request runs the handler and answers its 201', async () => {
    const { payments, calls } = createRoutes();
    const first = await send(payments, '/payments', { key: newKey(), body: { amount: 100 } });
    expect([first.status, first.json, first.replayed]).toEqual([
      201,
      { id: 'pay_1', kind: 'payment', amount: 100 },
      false,
    ]);
    expect(calls.create).toBe(1);
  });

  it('E2: a duplicate gets the stored response without running the handler again', async () => {
    const { payments, calls } = createRoutes();
    const key = newKey();
    const first = await send(payments, '/payments', { key, body: { amount: 250 } });
    const second = await send(payments, '/payments', { key, body: { amount: 250 } });
    expect([second.status, second.json.id, second.replayed]).toEqual([201, first.json.id, true]);
    expect(second.bytes.equals(first.bytes)).toBe(true);
    expect(calls.create).toBe(1);
  });

  it('F3: the same key with another body is a 422', async () => {
    const { payments } = createRoutes();
    const key = newKey();
    await send(payments, '/payments', { key, body: { amount: 100 } });
    expect((await send(payments, '/payments', { key, body: { amount: 999 } })).status).toBe(422);
  });

  it('K2: a missing Idempotency-Key header is a 400', async () => {
    const { payments, calls } = createRoutes();
    expect((await send(payments, '/payments', { body: { amount: 50 } })).status).toBe(400);
    expect(calls.create).toBe(0);
  });

  it('E4 (differs on purpose: nestarc deletes the key so that a retry runs again): a handler that throws has its error stored and rethrown on the retry, which does not run it again', async () => {
    const { failing, calls } = createRoutes();
    const key = newKey();
    await expect(send(failing, '/payments/failing', { key, body: { payload: 1 } })).rejects.toThrow(
      'intentional failure',
    );
    await expect(send(failing, '/payments/failing', { key, body: { payload: 1 } })).rejects.toThrow(
      'intentional failure',
    );
    expect(calls.fail).toBe(1);
    expect(await store.get(formatScope('POST /payments/failing', 'public'), key)).toMatchObject({
      state: 'completed',
      outcome: { kind: 'error', status: 500 },
    });
  });

  it('R1: a retention per route (refund: 300 s) is the record’s, from its completion', async () => {
    const { refund, calls } = createRoutes();
    const key = newKey();
    const first = await send(refund, '/payments/refund', { key, body: { id: 'pay_x' } });
    const second = await send(refund, '/payments/refund', { key, body: { id: 'pay_x' } });
    expect([first.status, second.status, second.json]).toEqual([202, 202, first.json]);
    expect(calls.refund).toBe(1);
    const record = await store.get(formatScope('POST /payments/refund', 'public'), key);
    expect(record!.expiresAt.getTime() - record!.completedAt!.getTime()).toBe(300_000);
  });

  it('E2 (differs on purpose: the listed headers, not every x- header): Location and the listed X-Request-Id are replayed', async () => {
    const { withHeaders, calls } = createRoutes();
    const key = newKey();
    const first = await send(withHeaders, '/payments/with-headers', { key, body: { amount: 100 } });
    const second = await send(withHeaders, '/payments/with-headers', { key, body: { amount: 100 } });
    expect(first.headers.get('location')).toBe('/payments/pay_header_1');
    expect([second.status, second.json]).toEqual([201, first.json]);
    expect(second.headers.get('location')).toBe('/payments/pay_header_1');
    expect(second.headers.get('x-request-id')).toBe('req_header_1');
    expect(calls.create).toBe(1);
  });

  it('E2: a header outside the allowlist reaches the first client and is not replayed', async () => {
    const route = idempotent(
      async () => new Response('{}', { status: 201, headers: { 'x-request-id': 'req_1', etag: '"pay_1"' } }),
      options(),
    );
    const key = newKey();
    const first = await send(route, '/payments', { key });
    const second = await send(route, '/payments', { key });
    expect(first.headers.get('x-request-id')).toBe('req_1');
    expect(second.headers.get('x-request-id')).toBeNull();
    expect(second.headers.get('etag')).toBe('"pay_1"');
  });

  it('S1: the same key and body on /payments and /transfers runs both handlers, and each replays its own', async () => {
    const { payments, transfers, calls } = createRoutes();
    const key = newKey();
    const pay = await send(payments, '/payments', { key, body: { amount: 100 } });
    const transfer = await send(transfers, '/transfers', { key, body: { amount: 100 } });
    expect([pay.json.kind, transfer.json.kind]).toEqual(['payment', 'transfer']);
    expect((await send(payments, '/payments', { key, body: { amount: 100 } })).json).toEqual(pay.json);
    expect((await send(transfers, '/transfers', { key, body: { amount: 100 } })).json).toEqual(transfer.json);
    expect([calls.create, calls.transfer]).toEqual([1, 1]);
  });

  it('S1: the actual path scopes the key: /payments/pay_1/capture and /payments/pay_2/capture are two records', async () => {
    const { capture, calls } = createRoutes();
    const key = newKey();
    const params = (id: string): RouteContext => ({ params: Promise.resolve({ id }) });
    const one = await send(capture, '/payments/pay_1/capture', { key, body: { amount: 100 } }, params('pay_1'));
    const two = await send(capture, '/payments/pay_2/capture', { key, body: { amount: 100 } }, params('pay_2'));
    expect([one.json.of, two.json.of, two.replayed]).toEqual(['pay_1', 'pay_2', false]);
    expect(calls.capture).toBe(2);
  });

  it('E1/E3: two truly concurrent identical requests run the handler once; the other is a 409 or a replay', async () => {
    const { payments, calls } = createRoutes();
    const key = newKey();
    const [a, b] = await Promise.all([
      send(payments, '/payments', { key, body: { amount: 777 } }),
      send(payments, '/payments', { key, body: { amount: 777 } }),
    ]);
    expect(calls.create).toBe(1);
    const statuses = [a.status, b.status].sort();
    expect([
      [201, 201],
      [201, 409],
    ]).toContainEqual(statuses);
    if (statuses[1] === 201) expect(a.bytes.equals(b.bytes)).toBe(true);
  });

  it('S1: another endpoint with the same key and another body is a 201 of its own, not a 422', async () => {
    const { payments, transfers } = createRoutes();
    const key = newKey();
    await send(payments, '/payments', { key, body: { amount: 100 } });
    const transfer = await send(transfers, '/transfers', { key, body: { amount: 999 } });
    expect([transfer.status, transfer.json.kind, transfer.json.amount]).toEqual([201, 'transfer', 999]);
  });

  it('S1/F1: the query string neither scopes nor fingerprints the request by default: /search?a=1 and /search?b=2 are one', async () => {
    let calls = 0;
    const route = idempotent(async () => Response.json({ result: ++calls }), options());
    const key = newKey();
    await send(route, '/search?a=1', { key, body: { q: 'shoes' } });
    const second = await send(route, '/search?b=2', { key, body: { q: 'shoes' } });
    expect([second.json, second.replayed]).toEqual([{ result: 1 }, true]);
  });

  it('F1: with fingerprintQuery the query string is part of the request: another query is a 422', async () => {
    const route = idempotent(async () => Response.json({ ok: true }), options({ fingerprintQuery: true }));
    const key = newKey();
    await send(route, '/search?a=1', { key, body: { q: 'shoes' } });
    expect((await send(route, '/search?a=1', { key, body: { q: 'shoes' } })).replayed).toBe(true);
    expect((await send(route, '/search?b=2', { key, body: { q: 'shoes' } })).status).toBe(422);
  });

  it('F1: with fingerprintHeaders a named header is part of the request', async () => {
    const route = idempotent(async () => Response.json({ ok: true }), options({ fingerprintHeaders: ['X-Currency'] }));
    const key = newKey();
    await send(route, '/payments', { key, body: { amount: 1 }, headers: { 'x-currency': 'EUR' } });
    expect(
      (await send(route, '/payments', { key, body: { amount: 1 }, headers: { 'x-currency': 'EUR' } })).replayed,
    ).toBe(true);
    expect(
      (await send(route, '/payments', { key, body: { amount: 1 }, headers: { 'x-currency': 'USD' } })).status,
    ).toBe(422);
  });

  it('F2: fingerprint: false skips the check: another body replays', async () => {
    const { payments } = createRoutes({ fingerprint: false });
    const key = newKey();
    const first = await send(payments, '/payments', { key, body: { amount: 1 } });
    const second = await send(payments, '/payments', { key, body: { amount: 2 } });
    expect([second.status, second.json, second.replayed]).toEqual([201, first.json, true]);
  });

  it('F1: object key order and white space make no difference to a JSON body', async () => {
    const { payments, calls } = createRoutes();
    const key = newKey();
    await send(payments, '/payments', {
      key,
      body: '{"amount":5,"currency":"EUR"}',
      headers: { 'content-type': 'application/json' },
    });
    const reordered = await send(payments, '/payments', {
      key,
      body: '{ "currency": "EUR",\n  "amount": 5 }',
      headers: { 'content-type': 'application/json; charset=utf-8' },
    });
    expect(reordered.replayed).toBe(true);
    expect(calls.create).toBe(1);
  });

  it('F2: a custom (async) fingerprint decides: the same result replays, another is a 422', async () => {
    const byAmount = async (input: unknown) => String((input as { json: { amount: number } }).json.amount);
    const { payments } = createRoutes({ fingerprint: byAmount });
    const key = newKey();
    await send(payments, '/payments', { key, body: { amount: 1, note: 'a' } });
    expect((await send(payments, '/payments', { key, body: { amount: 1, note: 'b' } })).replayed).toBe(true);
    expect((await send(payments, '/payments', { key, body: { amount: 2 } })).status).toBe(422);
  });

  it('F2: a fingerprint of selected fields ({ fields: ["json.amount"] })', async () => {
    const { payments } = createRoutes({ fingerprint: { fields: ['json.amount'] } });
    const key = newKey();
    await send(payments, '/payments', { key, body: { amount: 1, note: 'a' } });
    expect((await send(payments, '/payments', { key, body: { amount: 1, note: 'b' } })).replayed).toBe(true);
    expect((await send(payments, '/payments', { key, body: { amount: 2, note: 'a' } })).status).toBe(422);
  });

  it('E4: a custom fingerprint that throws fails before anything is claimed or run', async () => {
    const { payments, calls } = createRoutes({
      fingerprint: () => {
        throw new Error('resolver failed');
      },
    });
    const key = newKey();
    await expect(send(payments, '/payments', { key, body: { amount: 1 } })).rejects.toThrow('resolver failed');
    expect(await store.get(formatScope('POST /payments', 'public'), key)).toBeNull();
    expect(calls.create).toBe(0);
  });

  it('F3 before E3: a duplicate with another body while the first runs is a 422, not a 409', async () => {
    const { payments, gate } = createRoutes();
    const key = newKey();
    gate.close();
    const first = send(payments, '/payments', { key, body: { amount: 1 } });
    await gate.whenWaiting(1);
    const other = await send(payments, '/payments', { key, body: { amount: 2 } });
    const same = await send(payments, '/payments', { key, body: { amount: 1 } });
    gate.open();
    await first;
    expect([other.status, other.json.code]).toEqual([422, 'idempotency_key_reused']);
    expect([same.status, same.json.code, same.headers.get('retry-after')]).toEqual([
      409,
      'idempotency_request_in_progress',
      '1',
    ]);
  });

  it('E2: a 204 without a body is stored and replayed as a 204 without a body', async () => {
    let calls = 0;
    const route = idempotent(async () => {
      calls++;
      return new Response(null, { status: 204 });
    }, options());
    const key = newKey();
    await send(route, '/payments/void', { key });
    const replay = await route(post(`${ORIGIN}/payments/void`, { key }));
    expect([replay.status, replay.body, replay.headers.get('idempotent-replayed')]).toEqual([204, null, 'true']);
    expect(calls).toBe(1);
  });

  it('E4: the outcome is stored before the first client gets its response', async () => {
    const { payments } = createRoutes();
    const key = newKey();
    await send(payments, '/payments', { key, body: { amount: 1 } });
    expect(await store.get(formatScope('POST /payments', 'public'), key)).toMatchObject({
      state: 'completed',
      outcome: { status: 201 },
    });
  });

  it('safe methods (differs on purpose: nestarc keys a GET it decorates): GET, HEAD and OPTIONS pass through, even with a key', async () => {
    let calls = 0;
    const route = idempotent(async () => new Response(`call ${++calls}`), options());
    const key = newKey();
    for (const method of ['GET', 'GET', 'HEAD', 'OPTIONS']) {
      const response = await route(new Request(`${ORIGIN}/payments`, { method, headers: { 'idempotency-key': key } }));
      expect(response.headers.get('idempotent-replayed')).toBeNull();
    }
    expect(calls).toBe(4);
    expect(await store.get(formatScope('GET /payments', 'public'), key)).toBeNull();
  });

  it('E2 (differs on purpose: nestarc skips binary responses): bytes, a stream and an ArrayBuffer are stored and replayed byte for byte', async () => {
    const bodies: Array<[string, () => BodyInit]> = [
      ['Uint8Array', () => new Uint8Array([0, 1, 2, 255, 254])],
      ['ArrayBuffer', () => new Uint8Array([0xde, 0xad, 0xbe, 0xef]).buffer],
      [
        'ReadableStream',
        () =>
          new ReadableStream({
            start(controller) {
              controller.enqueue(new Uint8Array([1, 2]));
              controller.enqueue(new Uint8Array([0xff, 0xc0]));
              controller.close();
            },
          }),
      ],
    ];
    for (const [name, body] of bodies) {
      let calls = 0;
      const route = idempotent(async () => {
        calls++;
        return new Response(body(), { headers: { 'content-type': 'application/octet-stream' } });
      }, options());
      const key = newKey();
      const first = await send(route, `/files/${name}`, { key });
      const second = await send(route, `/files/${name}`, { key });
      expect(second.replayed, name).toBe(true);
      expect(second.bytes.equals(first.bytes), name).toBe(true);
      expect(second.headers.get('content-type')).toBe('application/octet-stream');
      expect(calls, name).toBe(1);
    }
  });

  it('S1: the principal is the scope’s (nestarc’s scope function); sharedPrincipal shares keys (its scope “global”)', async () => {
    const { payments, calls } = createRoutes();
    const key = newKey();
    await send(payments, '/payments', { key, body: { amount: 1 }, headers: { 'x-account': 'tenant-42' } });
    expect(await store.get(formatScope('POST /payments', 'tenant-42'), key)).toMatchObject({ state: 'completed' });
    expect((await send(payments, '/payments', { key, body: { amount: 1 } })).replayed).toBe(false);
    expect(calls.create).toBe(2);
  });

  it('events (nestarc’s observability): claimed + completed, replayed, conflict and mismatch; a throwing onEvent changes nothing', async () => {
    const events: IdempotencyEvent[] = [];
    const { payments, gate } = createRoutes({
      onEvent: (event) => {
        events.push(event);
        throw new Error('sink down');
      },
    });
    const key = newKey();
    gate.close();
    const first = send(payments, '/payments', { key, body: { amount: 1 } });
    await gate.whenWaiting(1);
    await send(payments, '/payments', { key, body: { amount: 1 } });
    gate.open();
    expect((await first).status).toBe(201);
    await send(payments, '/payments', { key, body: { amount: 1 } });
    await send(payments, '/payments', { key, body: { amount: 2 } });
    expect(events.map((event) => event.type)).toEqual(['claimed', 'conflict', 'completed', 'replayed', 'mismatch']);
  });

  it('K4 (nestarc’s keyResolver): the key may come from the JSON body field idempotencyKey, left out of the fingerprint; header and field that differ are a 400', async () => {
    let calls = 0;
    const route = idempotent(async (request: Request) => {
      calls++;
      return Response.json({ key: idempotencyClaim(request)?.key ?? null, body: await request.json() });
    }, options());
    const key = newKey();
    const first = await send(route, '/payments', { body: { amount: 1, idempotencyKey: key } });
    expect(first.json).toEqual({ key, body: { amount: 1, idempotencyKey: key } });
    expect((await send(route, '/payments', { key, body: { amount: 1 } })).replayed).toBe(true);
    const differ = await send(route, '/payments', { key, body: { amount: 1, idempotencyKey: newKey() } });
    expect([differ.status, differ.json.code]).toEqual([400, 'idempotency_key_ambiguous']);
    expect(calls).toBe(1);
  });

  it('E4: notStarted(response) answers a refusal without storing it; the same key then runs', async () => {
    let calls = 0;
    const route = idempotent(async (request: Request) => {
      calls++;
      const { amount } = await request.json();
      if (amount <= 0) return notStarted(Response.json({ error: 'amount must be positive' }, { status: 400 }));
      return Response.json({ amount }, { status: 201 });
    }, options());
    const key = newKey();
    const refused = await send(route, '/payments', { key, body: { amount: 0 } });
    expect([refused.status, refused.replayed]).toEqual([400, false]);
    // The fixed request with the same key: a new fingerprint over a released claim, so it runs.
    const fixed = await send(route, '/payments', { key, body: { amount: 5 } });
    expect([fixed.status, fixed.json]).toEqual([201, { amount: 5 }]);
    expect(calls).toBe(2);
  });
});
