/**
 * A body without Content-Length (chunked: Node's `fetch` with a stream body and `duplex: 'half'`,
 * a proxy, a streaming client) on a Next-style route handler made idempotent by `idempotent()`:
 * read within `maxBodyBytes` as it streams, then charged once and replayed (E2), or refused with
 * 413 past the limit with nothing run — never a 500.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { getRequestListener } from '@hono/node-server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { IdempotencyStore } from '@idem/core';
import { idempotent } from '@idem/fetch';
import { STORE_TARGETS } from './support.ts';
import { streamOf } from '../../../test/support/streams.ts';

const MAX_BODY_BYTES = 4096;

describe.each(STORE_TARGETS)('a Next-style route handler given chunked bodies, on $name', (target) => {
  let store: IdempotencyStore;
  let close: () => Promise<void>;
  let server: Server;
  let url: string;
  let runs = 0;

  beforeAll(async () => {
    ({ store, close } = await target.open());
    // `export const POST = idempotent(...)`, served as Next's Node server serves route handlers: a standard Request.
    const POST = idempotent(
      async (request: Request) => {
        const { amount } = (await request.json()) as { amount: number };
        runs++;
        return Response.json({ id: `pay_${runs}`, amount }, { status: 201 });
      },
      { store, principal: () => 'alice', maxBodyBytes: MAX_BODY_BYTES },
    );
    server = createServer(getRequestListener((request) => POST(request)));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/api/payments`;
  });
  afterAll(async () => {
    server?.closeAllConnections();
    await new Promise<void>((resolve) => server?.close(() => resolve()));
    await close();
  });

  const pay = (body: string, key: string) =>
    fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body: streamOf(body, 512),
      duplex: 'half',
    } as RequestInit & { duplex: 'half' });

  it('E2: a chunked body is run once (201) and replayed byte for byte', async () => {
    const before = runs;
    const key = `chunked-${randomUUID()}`;
    const first = await pay(JSON.stringify({ amount: 10 }), key);
    const firstText = await first.text();
    const again = await pay(JSON.stringify({ amount: 10 }), key);
    expect(first.status).toBe(201);
    expect(again.status).toBe(201);
    expect(await again.text()).toBe(firstText);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(runs - before).toBe(1);
  });

  it('a chunked body past maxBodyBytes is refused with 413 and nothing runs', async () => {
    const before = runs;
    const answer = await pay(JSON.stringify({ amount: 10, note: 'x'.repeat(MAX_BODY_BYTES) }), `big-${randomUUID()}`);
    expect(answer.status).toBe(413);
    expect(runs).toBe(before);
  });
});
