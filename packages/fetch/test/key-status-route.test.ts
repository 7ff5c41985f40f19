/**
 * R2, A1, S1: `keyStatusRoute(options)` answers, over plain HTTP, what became of one of the
 * caller's keys on an `idempotent()` route, given the same options object: the route's operation
 * is its method and path (`POST /api/orders`).
 */
import { describe, expect, it } from 'vitest';
import { MemoryStore } from '@idem/core';
import { idempotent, keyStatusRoute } from '@idem/fetch';

function app() {
  const options = {
    store: new MemoryStore(),
    principal: (request: Request) => request.headers.get('x-user-id') ?? 'anonymous',
  };
  const POST = idempotent(async (request: Request) => {
    const { amount } = (await request.json()) as { amount: number };
    return Response.json({ orderId: 'o-1', amount }, { status: 201 });
  }, options);
  const GET = keyStatusRoute(options);
  const order = (key: string, user = 'alice') =>
    POST(
      new Request('http://localhost/api/orders', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': `"${key}"`, 'x-user-id': user },
        body: '{"amount":42}',
      }),
    );
  const status = (path: string, user = 'alice', method = 'GET') =>
    GET(new Request(`http://localhost${path}`, { method, headers: { 'x-user-id': user } }));
  return { order, status };
}

const operation = encodeURIComponent('POST /api/orders');

describe('keyStatusRoute (R2, A1, S1)', () => {
  it("answers the caller's key with its generation and the stored response, uncached", async () => {
    const { order, status } = app();
    expect((await order('k-1')).status).toBe(201);
    const response = await status(`/api/idempotency/keys/k-1?operation=${operation}`);
    expect(response.status).toBe(200);
    expect(response.headers.get('cache-control')).toBe('no-store');
    const document = (await response.json()) as {
      key: string;
      operation: string;
      generations: Array<{ state: string; status?: number }>;
    };
    expect(document).toMatchObject({ key: 'k-1', operation: 'POST /api/orders' });
    expect(document.generations.map((g) => [g.state, g.status])).toEqual([['completed', 201]]);
    expect(JSON.stringify(document)).toContain('o-1');
  });

  it("answers 404 alike for an unknown key and another principal's key (S1)", async () => {
    const { order, status } = app();
    await order('k-2', 'alice');
    const unknown = await status(`/api/idempotency/keys/nope?operation=${operation}`, 'bob');
    const others = await status(`/api/idempotency/keys/k-2?operation=${operation}`, 'bob');
    expect([unknown.status, others.status]).toEqual([404, 404]);
    expect(await others.text()).toBe(await unknown.text());
  });

  it('reads the key from ?key= as well, and finds nothing on another operation', async () => {
    const { order, status } = app();
    await order('k-3');
    expect((await status(`/status?key=k-3&operation=${operation}`)).status).toBe(200);
    expect((await status(`/status?key=k-3&operation=${encodeURIComponent('POST /api/other')}`)).status).toBe(404);
  });

  it('refuses a malformed key or a missing operation with 400, another method with 405', async () => {
    const { status } = app();
    const bad = await status(`/api/idempotency/keys/${encodeURIComponent('a\u0001b')}?operation=${operation}`);
    expect(bad.status).toBe(400);
    expect(bad.headers.get('content-type')).toBe('application/problem+json');
    expect(((await bad.json()) as { type: string }).type).toBe('http://localhost/idempotency#idempotency_key_invalid');
    expect((await status('/api/idempotency/keys/k-1')).status).toBe(400);
    const post = await status(`/api/idempotency/keys/k-1?operation=${operation}`, 'alice', 'POST');
    expect(post.status).toBe(405);
    expect(post.headers.get('allow')).toBe('GET, HEAD');
  });

  it("S1: a caller whose principal is the shared '*' is refused with 403 problem+json, and sees nothing", async () => {
    const { order, status } = app();
    expect((await order('k-shared', '*')).status).toBe(201);
    const response = await status(`/api/idempotency/keys/k-shared?operation=${operation}`, '*');
    expect(response.status).toBe(403);
    expect(response.headers.get('content-type')).toBe('application/problem+json');
    const text = await response.text();
    expect(JSON.parse(text)).toMatchObject({ status: 403, code: 'idempotency_lookup_shared_principal' });
    expect(text).not.toContain('o-1');
  });
});
