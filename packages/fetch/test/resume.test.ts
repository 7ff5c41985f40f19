/**
 * Black-box (E8): routes with `onFailure: 'resume'` through `idempotent()` (a Fetch handler) and
 * the Hono middleware (`app.request`), on MemoryStore, SQLite and PostgreSQL. A payment is two steps, `reserve` then
 * `charge`, with the handler's claim; the provider fails the first charge of each step key (a
 * timeout: the handler answers 502), succeeds on the next. Side effects are counted.
 */
import { randomUUID } from 'node:crypto';
import { Hono, type Context, type MiddlewareHandler } from 'hono';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryStore, type ClaimContext, type IdempotencyStore } from '@idem/core';
import { finalFailure, idempotencyClaim, idempotent, type IdempotentOptions } from '@idem/fetch';
import { idempotency } from '@idem/fetch/hono';
import { post, read, STORE_TARGETS, type StoreTarget } from './support.ts';

const TARGETS: StoreTarget[] = [
  { name: 'MemoryStore', open: async () => ({ store: new MemoryStore(), close: async () => {} }) },
  ...STORE_TARGETS,
];

function createProvider() {
  const counts = { reservations: 0, chargeAttempts: 0, charges: 0 };
  const attempts = new Map<string, number>();
  /** The payment under `claim`: a 502 Response when the provider times out. */
  async function pay(claim: ClaimContext, amount: number): Promise<Response> {
    const reservation = await claim.step('reserve', (stepKey) => {
      counts.reservations += 1;
      return `res_${stepKey.slice(-6)}`;
    });
    let charge: string;
    try {
      charge = await claim.step('charge', (stepKey) => {
        counts.chargeAttempts += 1;
        const attempt = (attempts.get(stepKey) ?? 0) + 1;
        attempts.set(stepKey, attempt);
        if (attempt === 1) throw new Error('provider timeout');
        counts.charges += 1;
        return `ch_${stepKey.slice(-6)}`;
      });
    } catch {
      // A step that throws is not stored: the retry runs it again.
      return Response.json({ error: 'provider timeout' }, { status: 502 });
    }
    return Response.json({ id: charge, reservation, amount, attempt: claim.attempt }, { status: 201 });
  }
  return { counts, pay };
}

const newKey = () => `resume-${randomUUID()}`;

describe.each(TARGETS)('@idem/fetch idempotent() with onFailure: resume (E8) on $name', (target) => {
  const provider = createProvider();
  let store: IdempotencyStore;
  let close: () => Promise<void>;
  beforeAll(async () => ({ store, close } = await target.open()));
  afterAll(() => close());
  const options = (): IdempotentOptions => ({ store, principal: () => 'alice', onFailure: 'resume' });
  const lazy = <T extends (...args: never[]) => unknown>(make: () => T) => {
    let made: T | undefined;
    return () => (made ??= make());
  };
  const resumeHandler = lazy(() =>
    idempotent(async (request: Request): Promise<Response> => {
      const { amount } = (await request.json()) as { amount: number };
      if (amount === 402) return finalFailure(Response.json({ error: 'provider says: do not retry' }, { status: 500 }));
      if (amount === 400) return Response.json({ error: 'bad amount' }, { status: 400 });
      return provider.pay(idempotencyClaim(request)!, amount);
    }, options()),
  );
  const replayHandler = lazy(() =>
    idempotent(
      async (request: Request) =>
        provider.pay(idempotencyClaim(request)!, ((await request.json()) as { amount: number }).amount),
      { store, principal: () => 'alice' },
    ),
  );
  const handler = (request: Request) => resumeHandler()(request);
  const replayOnly = (request: Request) => replayHandler()(request);
  const url = 'http://shop.test/v1/payments';

  it('E8: a 5xx after the start is answered with Idempotent-Resumable; the retry completes it, skipping the step done; a later retry replays', async () => {
    const key = newKey();
    const before = { ...provider.counts };
    const first = await read(await handler(post(url, { key, body: { amount: 14 } })));
    expect(first.status).toBe(502);
    expect(first.json).toEqual({ error: 'provider timeout' });
    expect(first.headers.get('idempotent-resumable')).toBe('true');
    expect(first.replayed).toBe(false);

    const retry = await read(await handler(post(url, { key, body: { amount: 14 } })));
    expect(retry.status).toBe(201);
    expect(retry.json).toMatchObject({ amount: 14, attempt: 2 });
    expect(retry.headers.get('idempotent-resumable')).toBeNull();
    expect(retry.replayed).toBe(false);

    const again = await read(await handler(post(url, { key, body: { amount: 14 } })));
    expect(again.replayed).toBe(true);
    expect(again.headers.get('idempotent-resumable')).toBeNull();
    expect(again.text).toBe(retry.text);

    expect(provider.counts.reservations - before.reservations).toBe(1);
    expect(provider.counts.charges - before.charges).toBe(1);
    expect(provider.counts.chargeAttempts - before.chargeAttempts).toBe(2);
  });

  it('E8/F3: another body on a resumable key is refused with 422 and runs nothing', async () => {
    const key = newKey();
    const first = await handler(post(url, { key, body: { amount: 14 } }));
    expect(first.headers.get('idempotent-resumable')).toBe('true');
    const reservations = provider.counts.reservations;
    const other = await read(await handler(post(url, { key, body: { amount: 15 } })));
    expect(other.status).toBe(422);
    expect(other.json).toMatchObject({ code: 'idempotency_key_reused' });
    expect(provider.counts.reservations).toBe(reservations);
  });

  it.each([
    [400, 'a 4xx response'],
    [402, 'a 5xx response returned as finalFailure(response)'],
  ])('E8/E4: under resume, amount %i (%s) is final: stored, replayed, never marked resumable', async (amount) => {
    const key = newKey();
    const first = await read(await handler(post(url, { key, body: { amount } })));
    expect(first.status).toBeGreaterThanOrEqual(400);
    expect(first.headers.get('idempotent-resumable')).toBeNull();
    const replay = await read(await handler(post(url, { key, body: { amount } })));
    expect(replay.replayed).toBe(true);
    expect(replay.status).toBe(first.status);
    expect(replay.text).toBe(first.text);
  });

  it('E8: a handler that throws is rethrown to its host, unmarked, and leaves the key resumable: the retry runs it again', async () => {
    let runs = 0;
    const throwing = idempotent(
      async () => {
        runs += 1;
        if (runs === 1) throw new Error('provider exploded');
        return new Response('done', { status: 201 });
      },
      { store, principal: () => 'alice', onFailure: 'resume' },
    );
    const key = newKey();
    await expect(throwing(post(url, { key, body: { amount: 1 } }))).rejects.toThrow('provider exploded');
    const retry = await read(await throwing(post(url, { key, body: { amount: 1 } })));
    expect(retry.status).toBe(201);
    expect(retry.replayed).toBe(false);
    expect(runs).toBe(2);
  });

  it('E4: a route that replays its failures is unchanged: the 502 is stored and replayed, no resumable marker', async () => {
    const key = newKey();
    const first = await read(await replayOnly(post(url, { key, body: { amount: 14 } })));
    expect(first.status).toBe(502);
    expect(first.headers.get('idempotent-resumable')).toBeNull();
    const replay = await read(await replayOnly(post(url, { key, body: { amount: 14 } })));
    expect(replay.replayed).toBe(true);
    expect(replay.status).toBe(502);
  });

  it('R4: the route is published with its onFailure, and resume keeps keys 30 days by default', () => {
    expect(resumeHandler().describeEndpoint('POST /v1/payments')).toMatchObject({
      transport: 'http',
      endpoint: 'HTTP POST /v1/payments',
      keySources: ['Idempotency-Key header', 'JSON body field idempotencyKey'],
      onFailure: 'resume',
      retentionMs: 30 * 86_400_000,
    });
    expect(replayHandler().describeEndpoint('POST /v1/payments')).toMatchObject({
      onFailure: 'replay',
      retentionMs: 86_400_000,
    });
  });
});

describe.each(TARGETS)('@idem/fetch/hono with onFailure: resume (E8) on $name', (target) => {
  const provider = createProvider();
  const app = new Hono();
  const tenant = (c: Context) => c.req.header('x-tenant') ?? 'public';
  let store: IdempotencyStore;
  let close: () => Promise<void>;
  beforeAll(async () => ({ store, close } = await target.open()));
  afterAll(() => close());
  let middleware: MiddlewareHandler | undefined;
  app.use('/v1/*', (c, next) =>
    (middleware ??= idempotency({ store, principal: tenant, onFailure: 'resume' }))(c, next),
  );
  app.post('/v1/payments', async (c) => provider.pay(idempotencyClaim(c)!, (await c.req.json()).amount));
  let thrown = 0;
  app.post('/v1/explode', () => {
    thrown += 1;
    if (thrown === 1) throw new Error('provider exploded');
    return new Response('done', { status: 201 });
  });
  app.post('/v1/final', (c) => finalFailure(c.json({ error: 'final' }, 503)));
  const request = (path: string, key: string, body: unknown = { amount: 14 }) =>
    app.request(post(`http://shop.test${path}`, { key, body }));

  it('E8: a 5xx response is marked resumable; the retry completes it with one reservation and one charge; a later retry replays', async () => {
    const key = newKey();
    const first = await read(await request('/v1/payments', key));
    expect(first.status).toBe(502);
    expect(first.headers.get('idempotent-resumable')).toBe('true');
    const retry = await read(await request('/v1/payments', key));
    expect(retry.status).toBe(201);
    expect(retry.json).toMatchObject({ attempt: 2 });
    const again = await read(await request('/v1/payments', key));
    expect(again.replayed).toBe(true);
    expect(again.text).toBe(retry.text);
    expect(provider.counts).toMatchObject({ reservations: 1, charges: 1, chargeAttempts: 2 });
  });

  it("E8: a thrown error, which Hono's onError answers 500, is resumable: the retry runs the handler again", async () => {
    const key = newKey();
    const first = await request('/v1/explode', key);
    expect(first.status).toBe(500);
    expect(first.headers.get('idempotent-resumable')).toBe('true');
    const retry = await request('/v1/explode', key);
    expect(retry.status).toBe(201);
    expect(thrown).toBe(2);
  });

  it('E8: a 5xx returned as finalFailure(c.json(…)) is final: replayed, never marked resumable', async () => {
    const key = newKey();
    const first = await request('/v1/final', key);
    expect(first.status).toBe(503);
    expect(first.headers.get('idempotent-resumable')).toBeNull();
    const replay = await request('/v1/final', key);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
  });

  it('E8/F3: another body on a resumable key is 422', async () => {
    const key = newKey();
    expect((await request('/v1/payments', key)).headers.get('idempotent-resumable')).toBe('true');
    expect((await request('/v1/payments', key, { amount: 15 })).status).toBe(422);
  });
});
