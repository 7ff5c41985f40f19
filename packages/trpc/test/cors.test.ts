/**
 * CORS on the tRPC adapters, over real HTTP. The fetch adapter (Next.js App Router route
 * handlers, Workers, Deno, Bun) has none of its own: the t3-shaped route handler with
 * `idempotencyCors` / `idempotencyCorsHeaders` from @idem/core. The standalone adapter takes a
 * Connect middleware: the `cors` package with `idempotencyCors`' configuration. What a browser on
 * another origin needs: `Idempotency-Key` allowed in preflight, `Idempotent-Replayed` and
 * `Retry-After` exposed.
 */
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import cors from 'cors';
import superjson from 'superjson';
import { createHTTPServer } from '@trpc/server/adapters/standalone';
import { idempotencyCors } from '@idem/core/http';
import { MemoryStore } from '@idem/core';
import { idempotencyContext } from '../src/index.ts';
import { createTestApp } from './app.ts';
import type { RunningServer } from './http.ts';
import { createT3App, serveFetchHandler, SHOP_ORIGIN } from './t3.ts';

const running: RunningServer[] = [];
afterEach(async () => {
  for (const server of running.splice(0)) await server.close();
});

async function start() {
  const app = createT3App();
  const server = await serveFetchHandler(app.handlerWithCors);
  running.push(server);
  return { ...app, url: `${server.url}/api/trpc` };
}

const pay = (url: string, headers: Record<string, string>, amount = 5) =>
  fetch(`${url}/payment.createByHeader`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(superjson.serialize({ amount })),
  });

describe('CORS on the tRPC fetch adapter (idempotencyCorsHeaders)', () => {
  it('answers the preflight of a keyed mutation: Idempotency-Key, content-type, authorization and trpc-accept allowed', async () => {
    const { url } = await start();
    const response = await fetch(`${url}/payment.createByHeader`, {
      method: 'OPTIONS',
      headers: {
        origin: SHOP_ORIGIN,
        'access-control-request-method': 'POST',
        'access-control-request-headers': 'authorization,content-type,idempotency-key,trpc-accept',
      },
    });
    expect(response.status).toBe(204);
    expect(response.headers.get('access-control-allow-origin')).toBe(SHOP_ORIGIN);
    expect(response.headers.get('access-control-allow-methods')).toBe('GET, POST');
    const allowed = response.headers.get('access-control-allow-headers')!.toLowerCase().split(', ');
    expect(allowed).toEqual(
      expect.arrayContaining(['idempotency-key', 'content-type', 'authorization', 'trpc-accept']),
    );
    expect(response.headers.get('vary')).toContain('Origin');
  });

  it('E2: exposes Idempotent-Replayed on a replay, so a script on the other origin can read it', async () => {
    const { url, calls } = await start();
    const headers = { origin: SHOP_ORIGIN, 'idempotency-key': 'cors-1' };
    const first = await pay(url, headers);
    const replay = await pay(url, headers);
    expect([first.status, replay.status]).toEqual([200, 200]);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.headers.get('access-control-allow-origin')).toBe(SHOP_ORIGIN);
    expect(replay.headers.get('access-control-expose-headers')).toBe(
      'Idempotent-Replayed, Idempotent-Resumable, Retry-After',
    );
    expect(calls.createByHeader).toBe(1);
  });

  it('E3: exposes Retry-After on a 409 while the first call runs', async () => {
    const app = await start();
    const held = app.hold();
    const body = JSON.stringify(superjson.serialize({ amount: 5, idempotencyKey: 'cors-409' }));
    const send = () =>
      fetch(`${app.url}/payment.slow`, {
        method: 'POST',
        headers: { origin: SHOP_ORIGIN, 'content-type': 'application/json' },
        body,
      });
    const first = send();
    await held.started;
    const conflict = await send();
    held.release();
    expect(conflict.status).toBe(409);
    expect(conflict.headers.get('retry-after')).toBe('1');
    expect(conflict.headers.get('access-control-expose-headers')).toContain('Retry-After');
    expect((await first).status).toBe(200);
  });

  it('gives an origin it does not allow no Access-Control-Allow-Origin: the browser blocks the call', async () => {
    const { url } = await start();
    const preflight = await fetch(`${url}/payment.createByHeader`, {
      method: 'OPTIONS',
      headers: { origin: 'http://evil.localhost', 'access-control-request-method': 'POST' },
    });
    expect(preflight.headers.get('access-control-allow-origin')).toBeNull();
    expect(preflight.headers.get('access-control-allow-headers')).toBeNull();
  });

  it('sets the headers on a streamed batch too (httpBatchStreamLink across origins)', async () => {
    const { url } = await start();
    const input = encodeURIComponent(JSON.stringify({ 0: superjson.serialize(undefined) }));
    const response = await fetch(`${url}/payment.count?batch=1&input=${input}`, {
      headers: { origin: SHOP_ORIGIN, 'trpc-accept': 'application/jsonl' },
    });
    expect(response.status).toBe(200);
    expect(response.headers.get('transfer-encoding')).toBe('chunked');
    expect(response.headers.get('access-control-allow-origin')).toBe(SHOP_ORIGIN);
    await response.text();
  });
});

describe('CORS on the standalone adapter (createHTTPServer({ middleware: cors(idempotencyCors(…)) }))', () => {
  async function startStandaloneWithCors() {
    const app = createTestApp(new MemoryStore());
    const server = createHTTPServer({
      router: app.router,
      createContext: (opts) => ({ user: 'alice', deny: false, ...idempotencyContext(opts) }),
      middleware: cors(idempotencyCors({ origin: SHOP_ORIGIN })),
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    running.push({
      url: '',
      close: () => new Promise<void>((done) => server.close(() => done())),
    });
    return { ...app, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
  }

  it('answers the preflight with Idempotency-Key allowed, and exposes Idempotent-Replayed on the replay', async () => {
    const { url, calls } = await startStandaloneWithCors();
    const preflight = await fetch(`${url}/createOrder`, {
      method: 'OPTIONS',
      headers: {
        origin: SHOP_ORIGIN,
        'access-control-request-method': 'POST',
        'access-control-request-headers': 'idempotency-key,content-type',
      },
    });
    expect(preflight.status).toBe(204);
    expect(preflight.headers.get('access-control-allow-origin')).toBe(SHOP_ORIGIN);
    expect(preflight.headers.get('access-control-allow-headers')!.toLowerCase()).toContain('idempotency-key');

    const send = () =>
      fetch(`${url}/createOrder`, {
        method: 'POST',
        headers: { origin: SHOP_ORIGIN, 'content-type': 'application/json', 'idempotency-key': 'standalone-1' },
        body: '{"amount":5}',
      });
    await send();
    const replay = await send();
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.headers.get('access-control-allow-origin')).toBe(SHOP_ORIGIN);
    expect(replay.headers.get('access-control-expose-headers')).toBe(
      'Idempotent-Replayed,Idempotent-Resumable,Retry-After',
    );
    expect(calls.createOrder).toBe(1);
  });
});
