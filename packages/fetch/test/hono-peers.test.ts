/**
 * The behaviour cases of hono-idempotency's middleware suite (paveg/hono-idempotency,
 * tests/middleware.test.ts), ported onto `@idem/fetch/hono` through a real Hono app
 * (`app.request`), on SQLite and PostgreSQL. Where idem's contract differs on purpose the test
 * says so and cites the rule (docs/spec.md): hono-idempotency deletes the key on a thrown error or
 * a non-2xx response, idem stores every outcome once the handler started (E4); its header is
 * `Idempotency-Replayed`, idem's Stripe's `Idempotent-Replayed` (E2); it accepts keys of any
 * characters up to a configurable length, idem visible ASCII up to 255 (K3).
 */
import { randomUUID } from 'node:crypto';
import { Hono, type Context } from 'hono';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatScope, type IdempotencyEvent, type IdempotencyStore } from '@idem/core';
import { idempotencyClaim, notStarted } from '@idem/fetch';
import { idempotency, type HonoIdempotencyOptions } from '@idem/fetch/hono';
import { Gate, STORE_TARGETS, read } from './support.ts';

describe.each(STORE_TARGETS)('@idem/fetch/hono on $name: the cases of hono-idempotency', (target) => {
  let store: IdempotencyStore;
  let close: () => Promise<void>;
  beforeAll(async () => ({ store, close } = await target.open()));
  afterAll(() => close());

  /** A fresh key per call: the tests share one store. */
  const newKey = () => `hono-${randomUUID()}`;
  const tenant = (c: Context) => c.req.header('x-tenant') ?? 'public';

  /** hono-idempotency's test app, with idem's middleware on /api/*. */
  function createApp(options: Partial<HonoIdempotencyOptions> = {}) {
    const gate = new Gate();
    const calls = { count: 0 };
    const app = new Hono();
    app.use('/api/*', idempotency({ store, principal: tenant, ...options }));
    app.post('/api/text', (c) => {
      calls.count++;
      return c.text('hello');
    });
    app.post('/api/json', (c) => {
      calls.count++;
      return c.json({ message: 'ok' });
    });
    app.post('/api/create', async (c) => {
      calls.count++;
      return c.json(await c.req.json(), 201);
    });
    app.post('/api/error', () => {
      calls.count++;
      throw new Error('handler error');
    });
    app.post('/api/server-error', (c) => {
      calls.count++;
      return c.json({ error: 'fail', attempt: calls.count }, 500);
    });
    app.post('/api/slow', async (c) => {
      calls.count++;
      await gate.pass();
      return c.json({ done: true });
    });
    app.get('/api/get', (c) => {
      calls.count++;
      return c.text('get response');
    });
    app.patch('/api/update', (c) => {
      calls.count++;
      return c.json({ updated: true, call: calls.count });
    });
    app.onError((error, c) => c.json({ error: error.message }, 500));
    const request = (path: string, init: { key?: string; body?: unknown; headers?: Record<string, string> } = {}) => {
      const headers: Record<string, string> = { ...init.headers };
      if (init.key !== undefined) headers['idempotency-key'] = init.key;
      if (init.body !== undefined) headers['content-type'] ??= 'application/json';
      const body =
        init.body === undefined ? undefined : typeof init.body === 'string' ? init.body : JSON.stringify(init.body);
      return app.request(path, { method: 'POST', headers, ...(body === undefined ? {} : { body }) });
    };
    return { app, gate, calls, request };
  }

  it('E2: replays a text response for the same key, and the handler runs once', async () => {
    const { request, calls } = createApp();
    const key = newKey();
    const first = await read(await request('/api/text', { key }));
    const second = await read(await request('/api/text', { key }));
    expect([first.status, first.text, first.replayed]).toEqual([200, 'hello', false]);
    expect([second.status, second.text, second.replayed]).toEqual([200, 'hello', true]);
    expect(calls.count).toBe(1);
  });

  it('E2: replays a JSON response for the same key', async () => {
    const { request } = createApp();
    const key = newKey();
    await request('/api/json', { key });
    expect((await read(await request('/api/json', { key }))).json).toEqual({ message: 'ok' });
  });

  it('E2: replays the original status code (201) with the same body', async () => {
    const { request } = createApp();
    const key = newKey();
    const first = await read(await request('/api/create', { key, body: { item: 'A' } }));
    const second = await read(await request('/api/create', { key, body: { item: 'A' } }));
    expect(first.status).toBe(201);
    expect([second.status, second.json, second.replayed]).toEqual([201, { item: 'A' }, true]);
  });

  it('K2: a missing key on a required endpoint is a 400 problem (application/problem+json, type …#idempotency_key_missing); required is the default', async () => {
    const { request, calls } = createApp();
    const response = await read(await request('/api/text'));
    expect(response.status).toBe(400);
    expect(response.headers.get('content-type')).toBe('application/problem+json');
    expect(response.json).toMatchObject({ status: 400, code: 'idempotency_key_missing' });
    expect(response.json.type).toBe('http://localhost/idempotency#idempotency_key_missing');
    expect(calls.count).toBe(0);
  });

  it('K3 (differs on purpose: the limit is 255, not configurable): a 256-character key is a 400 idempotency_key_invalid, a 255-character key is accepted', async () => {
    const { request } = createApp();
    const tooLong = await read(await request('/api/text', { key: `${newKey()}${'a'.repeat(256)}`.slice(0, 256) }));
    expect([tooLong.status, tooLong.json.code]).toEqual([400, 'idempotency_key_invalid']);
    expect(tooLong.json.type).toMatch(/#idempotency_key_invalid$/);
    const exact = await request('/api/text', { key: `${newKey()}${'a'.repeat(255)}`.slice(0, 255) });
    expect(exact.status).toBe(200);
  });

  it('K3 (differs on purpose: keys are visible ASCII): a key with é, spaces or other characters outside 0x21–0x7E is a 400, not a key', async () => {
    const { request, calls } = createApp();
    // hono-idempotency accepts "r\u00E9q/key:with spaces&special=chars"; a key goes into primary keys, logs and trace tags.
    const spaced = await read(await request('/api/text', { key: 'req/key:with spaces&special=chars' }));
    expect([spaced.status, spaced.json.code]).toEqual([400, 'idempotency_key_invalid']);
    const latin = await read(await request('/api/text', { key: Buffer.from('r\u00e9q', 'utf8').toString('latin1') }));
    expect([latin.status, latin.json.code]).toEqual([400, 'idempotency_key_invalid']);
    // Characters that need encoding elsewhere (`/`, `:`, `&`, `=`) are visible ASCII: a key.
    const key = `req/key:${randomUUID()}&special=chars`;
    await request('/api/text', { key });
    expect((await read(await request('/api/text', { key }))).replayed).toBe(true);
    expect(calls.count).toBe(1);
  });

  it('E3: of two concurrent requests with one key, one runs and the other gets 409 with Retry-After: 1 as problem+json', async () => {
    const { request, gate, calls } = createApp();
    const key = newKey();
    gate.close();
    const first = request('/api/slow', { key });
    await gate.whenWaiting(1);
    const conflict = await read(await request('/api/slow', { key }));
    gate.open();
    expect((await first).status).toBe(200);
    expect(conflict.status).toBe(409);
    expect(conflict.headers.get('retry-after')).toBe('1');
    expect(conflict.headers.get('content-type')).toBe('application/problem+json');
    expect(conflict.json).toMatchObject({ code: 'idempotency_request_in_progress', retryAfter: 1 });
    expect(calls.count).toBe(1);
  });

  it('F3: the same key with another body is a 422 problem (code idempotency_key_reused), distinct from the 409, and nothing runs', async () => {
    const { request, calls } = createApp();
    const key = newKey();
    await request('/api/create', { key, body: { item: 'A' } });
    const reused = await read(await request('/api/create', { key, body: { item: 'B' } }));
    expect(reused.status).toBe(422);
    expect(reused.headers.get('content-type')).toBe('application/problem+json');
    expect(reused.json).toMatchObject({ code: 'idempotency_key_reused' });
    expect(reused.json.type).toMatch(/#idempotency_key_reused$/);
    expect(calls.count).toBe(1);
  });

  it('E2 (differs on purpose: Stripe’s header name): a replay carries Idempotent-Replayed: true, the first answer none', async () => {
    const { request } = createApp();
    const key = newKey();
    const first = await request('/api/text', { key });
    const second = await request('/api/text', { key });
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(second.headers.get('idempotency-replayed')).toBeNull();
  });

  it('E4 (differs on purpose: hono-idempotency deletes the key): a handler that throws has the response app.onError made of it stored and replayed; the handler runs once', async () => {
    const { request, calls } = createApp();
    const key = newKey();
    const first = await read(await request('/api/error', { key }));
    const second = await read(await request('/api/error', { key }));
    expect([first.status, first.json]).toEqual([500, { error: 'handler error' }]);
    expect([second.status, second.json, second.replayed]).toEqual([500, { error: 'handler error' }, true]);
    expect(calls.count).toBe(1);
    expect(await store.get(formatScope('POST /api/error', 'public'), key)).toMatchObject({
      state: 'completed',
      outcome: { status: 500 },
    });
  });

  it('E4 (differs on purpose: no retry after a 5xx, which may have charged): a 500 or 503 response is stored and replayed, the same key does not run the handler again', async () => {
    const { request, calls } = createApp();
    const key = newKey();
    const first = await read(await request('/api/server-error', { key }));
    const second = await read(await request('/api/server-error', { key }));
    expect(first.json).toEqual({ error: 'fail', attempt: 1 });
    expect([second.status, second.json, second.replayed]).toEqual([500, { error: 'fail', attempt: 1 }, true]);
    expect(calls.count).toBe(1);
  });

  it('E4: a refusal made before the work started (notStarted) is not stored: the claim is released and the same key runs again', async () => {
    const app = new Hono();
    let calls = 0;
    app.post('/api/flaky', idempotency({ store, principal: tenant }), (c) => {
      calls++;
      if (calls === 1) return notStarted(c.json({ error: 'temporarily unavailable' }, 503));
      return c.json({ success: true });
    });
    const key = newKey();
    const send = () => app.request('/api/flaky', { method: 'POST', headers: { 'idempotency-key': key } });
    expect((await send()).status).toBe(503);
    expect(await store.get(formatScope('POST /api/flaky', 'public'), key)).toMatchObject({ state: 'released' });
    const retry = await read(await send());
    expect([retry.status, retry.json, retry.replayed]).toEqual([200, { success: true }, false]);
    expect(calls).toBe(2);
  });

  it('K2: with required: false a request without a key runs without idempotency, reported as unkeyed', async () => {
    const events: IdempotencyEvent[] = [];
    const { request, calls } = createApp({ required: false, onEvent: (event) => void events.push(event) });
    expect((await read(await request('/api/text'))).text).toBe('hello');
    expect((await read(await request('/api/text'))).replayed).toBe(false);
    expect(calls.count).toBe(2);
    const unkeyed = { type: 'unkeyed', operation: 'POST /api/text', refused: false };
    expect(events).toEqual([unkeyed, unkeyed]);
  });

  it('K2: a request without a key where one is required is refused (400), reported as unkeyed and refused', async () => {
    const events: IdempotencyEvent[] = [];
    const { request, calls } = createApp({ onEvent: (event) => void events.push(event) });
    expect((await request('/api/text')).status).toBe(400);
    expect(calls.count).toBe(0);
    expect(events).toEqual([{ type: 'unkeyed', operation: 'POST /api/text', refused: true }]);
  });

  it('GET passes through untouched, even with a key', async () => {
    const { app, calls } = createApp();
    const key = newKey();
    for (let i = 0; i < 2; i++) {
      const response = await read(await app.request('/api/get', { headers: { 'idempotency-key': key } }));
      expect([response.status, response.text, response.replayed]).toEqual([200, 'get response', false]);
    }
    expect(calls.count).toBe(2);
  });

  it('PATCH is keyed by default', async () => {
    const { app, calls } = createApp();
    const key = newKey();
    const send = () => app.request('/api/update', { method: 'PATCH', headers: { 'idempotency-key': key } });
    await send();
    const second = await read(await send());
    expect([second.status, second.json, second.replayed]).toEqual([200, { updated: true, call: 1 }, true]);
    expect(calls.count).toBe(1);
  });

  it('E1/E2: the full flow — no record, a completed record with the response, a replay', async () => {
    const { request } = createApp();
    const key = newKey();
    const scope = formatScope('POST /api/json', 'public');
    expect(await store.get(scope, key)).toBeNull();
    await request('/api/json', { key });
    const record = await store.get(scope, key);
    expect(record).toMatchObject({ state: 'completed', generation: 1, outcome: { kind: 'success', status: 200 } });
    expect(JSON.parse(record!.outcome!.body!)).toMatchObject({ status: 200, body: { text: '{"message":"ok"}' } });
    expect((await read(await request('/api/json', { key }))).replayed).toBe(true);
  });

  it('S1: the same key on another endpoint is another record: both handlers run', async () => {
    const { request, calls } = createApp();
    const key = newKey();
    expect((await read(await request('/api/text', { key }))).text).toBe('hello');
    expect((await read(await request('/api/json', { key }))).json).toEqual({ message: 'ok' });
    expect(calls.count).toBe(2);
  });

  it('the handler sees its key on the context: idempotencyClaim(c).key (hono-idempotency: c.get("idempotencyKey"))', async () => {
    const app = new Hono();
    app.post('/api/context-check', idempotency({ store, principal: tenant }), (c) =>
      c.json({ key: idempotencyClaim(c)?.key ?? null }),
    );
    const key = newKey();
    const response = await app.request('/api/context-check', { method: 'POST', headers: { 'idempotency-key': key } });
    expect(await response.json()).toEqual({ key });
  });

  it('E2: the replay keeps Content-Type; Content-Length and Transfer-Encoding are not stored', async () => {
    const app = new Hono();
    app.post('/api/json', idempotency({ store, principal: tenant }), (c) =>
      c.json({ message: 'ok' }, 200, { 'transfer-encoding': 'chunked', 'content-length': '16' }),
    );
    const key = newKey();
    const send = () => app.request('/api/json', { method: 'POST', headers: { 'idempotency-key': key } });
    const first = await send();
    const second = await send();
    expect(second.headers.get('content-type')).toBe(first.headers.get('content-type'));
    expect(second.headers.get('content-type')).toMatch(/^application\/json/);
    const stored = JSON.parse((await store.get(formatScope('POST /api/json', 'public'), key))!.outcome!.body!);
    const names = (stored.headers as Array<[string, string]>).map(([name]) => name);
    expect(names).toContain('content-type');
    expect(names).not.toContain('content-length');
    expect(names).not.toContain('transfer-encoding');
  });

  it('F2: a custom fingerprint (method and path only) replays a request with another body', async () => {
    const { request } = createApp({ fingerprint: (input) => JSON.stringify([(input as { path: string }).path]) });
    const key = newKey();
    await request('/api/create', { key, body: { a: 1 } });
    const second = await read(await request('/api/create', { key, body: { a: 2 } }));
    expect([second.status, second.json, second.replayed]).toEqual([201, { a: 1 }, true]);
  });

  it('E2: Set-Cookie reaches the client that ran the handler and is never replayed', async () => {
    const app = new Hono();
    app.post(
      '/api/with-cookie',
      idempotency({ store, principal: tenant }),
      () =>
        new Response('ok', {
          headers: { 'content-type': 'text/plain', 'set-cookie': 'session=abc123; Path=/; HttpOnly' },
        }),
    );
    const key = newKey();
    const send = () => app.request('/api/with-cookie', { method: 'POST', headers: { 'idempotency-key': key } });
    const first = await send();
    expect(first.headers.get('set-cookie')).toBe('session=abc123; Path=/; HttpOnly');
    const second = await send();
    expect([second.status, second.headers.get('idempotent-replayed'), await second.text()]).toEqual([
      200,
      'true',
      'ok',
    ]);
    expect(second.headers.get('set-cookie')).toBeNull();
  });

  it('methods: ["PUT"] keys PUT only; POST then passes through', async () => {
    const app = new Hono();
    let puts = 0;
    let posts = 0;
    app.use('/api/*', idempotency({ store, principal: tenant, methods: ['PUT'] }));
    app.put('/api/resource', (c) => c.json({ put: ++puts }));
    app.post('/api/resource', (c) => c.json({ post: ++posts }));
    const key = newKey();
    const send = (method: string) => app.request('/api/resource', { method, headers: { 'idempotency-key': key } });
    await send('PUT');
    expect((await read(await send('PUT'))).json).toEqual({ put: 1 });
    await send('POST');
    expect((await read(await send('POST'))).json).toEqual({ post: 2 });
  });

  it('methods: [] keys nothing', async () => {
    const { request, calls } = createApp({ methods: [] });
    const key = newKey();
    await request('/api/text', { key });
    await request('/api/text', { key });
    expect(calls.count).toBe(2);
  });

  it('E4 (differs on purpose: hono-idempotency stores 2xx only): a 299, a 300 with Location and a 400 are each stored and replayed', async () => {
    const app = new Hono();
    let calls = 0;
    app.use('/api/*', idempotency({ store, principal: tenant }));
    app.post('/api/status-299', () => new Response(`edge ${++calls}`, { status: 299 }));
    app.post('/api/status-300', () => new Response(null, { status: 300, headers: { location: `/other/${++calls}` } }));
    app.post('/api/status-400', () => new Response(`bad request ${++calls}`, { status: 400 }));
    for (const path of ['/api/status-299', '/api/status-300', '/api/status-400']) {
      const key = newKey();
      const send = () => app.request(path, { method: 'POST', headers: { 'idempotency-key': key } });
      const first = await read(await send());
      const second = await read(await send());
      expect([second.status, second.text, second.headers.get('location'), second.replayed]).toEqual([
        first.status,
        first.text,
        first.headers.get('location'),
        true,
      ]);
      expect(await store.get(formatScope(`POST ${path}`, 'public'), key)).toMatchObject({
        state: 'completed',
        outcome: { status: first.status },
      });
    }
    expect(calls).toBe(3);
  });

  it('E2: a POST with an empty body replays', async () => {
    const { request, calls } = createApp();
    const key = newKey();
    await request('/api/text', { key });
    expect((await read(await request('/api/text', { key }))).replayed).toBe(true);
    expect(calls.count).toBe(1);
  });

  describe('maxBodyBytes: bodies over the limit are refused before anything is claimed (413)', () => {
    const limited = (maxBodyBytes: number) => {
      const app = new Hono();
      let calls = 0;
      app.post('/api/data', idempotency({ store, principal: tenant, maxBodyBytes }), (c) => c.text(`ok ${++calls}`));
      const send = (key: string, body: string | undefined, headers: Record<string, string> = {}) =>
        app.request('/api/data', {
          method: 'POST',
          headers: { 'idempotency-key': key, 'content-type': 'text/plain', ...headers },
          ...(body === undefined ? {} : { body }),
        });
      return { send, calls: () => calls };
    };
    const scopeOf = formatScope('POST /api/data', 'public');

    it('a Content-Length over the limit: 413 problem, nothing claimed, the handler does not run', async () => {
      const { send, calls } = limited(100);
      const key = newKey();
      const response = await read(await send(key, 'x'.repeat(200), { 'content-length': '200' }));
      expect(response.status).toBe(413);
      expect(response.headers.get('content-type')).toBe('application/problem+json');
      expect(response.json).toMatchObject({ type: 'about:blank', title: 'Content Too Large', status: 413 });
      expect(await store.get(scopeOf, key)).toBeNull();
      expect(calls()).toBe(0);
    });

    it('a body over the limit without Content-Length (streamed): 413', async () => {
      const { send } = limited(100);
      const stream = new ReadableStream({
        start(controller) {
          controller.enqueue(new TextEncoder().encode('x'.repeat(200)));
          controller.close();
        },
      });
      const app = new Hono();
      app.post('/api/data', idempotency({ store, principal: tenant, maxBodyBytes: 100 }), (c) => c.text('ok'));
      const response = await app.request(
        new Request('http://localhost/api/data', {
          method: 'POST',
          headers: { 'idempotency-key': newKey() },
          body: stream,
          duplex: 'half',
        } as RequestInit),
      );
      expect(response.status).toBe(413);
      expect((await send(newKey(), 'x'.repeat(50))).status).toBe(200);
    });

    it('a negative Content-Length does not let a large body through', async () => {
      const { send } = limited(100);
      expect((await send(newKey(), 'x'.repeat(200), { 'content-length': '-1' })).status).toBe(413);
    });

    it('maxBodyBytes: 0 takes an empty body and refuses one byte', async () => {
      const { send } = limited(0);
      expect((await send(newKey(), undefined)).status).toBe(200);
      expect((await send(newKey(), 'x')).status).toBe(413);
    });

    it('a key with a completed record and an oversized body: 413, the record unchanged; within the limit it replays', async () => {
      const { send, calls } = limited(50);
      const key = newKey();
      expect((await read(await send(key, 'small'))).text).toBe('ok 1');
      const before = await store.get(scopeOf, key);
      expect((await send(key, 'x'.repeat(100))).status).toBe(413);
      expect(await store.get(scopeOf, key)).toEqual(before);
      const replay = await read(await send(key, 'small'));
      expect([replay.text, replay.replayed]).toEqual(['ok 1', true]);
      expect(calls()).toBe(1);
    });
  });

  it('S1: the principal scopes keys (hono-idempotency’s cacheKeyPrefix): the same key from two tenants runs twice', async () => {
    const { request, calls } = createApp();
    const key = newKey();
    await request('/api/json', { key, headers: { 'x-tenant': 'tenant-a' } });
    const other = await read(await request('/api/json', { key, headers: { 'x-tenant': 'tenant-b' } }));
    expect(other.replayed).toBe(false);
    expect(calls.count).toBe(2);
    expect(await store.get(formatScope('POST /api/json', 'tenant-a'), key)).toMatchObject({ state: 'completed' });
  });

  it('S1: a principal and a key crafted to collide with another pair stay apart (the scope encodes the principal)', async () => {
    const { request, calls } = createApp();
    const suffix = randomUUID();
    await request('/api/json', { key: `x:POST:/api/json:y${suffix}`, headers: { 'x-tenant': 'a' } });
    const crafted = await read(
      await request('/api/json', { key: `y${suffix}`, headers: { 'x-tenant': 'a:POST:/api/json:x' } }),
    );
    expect(crafted.replayed).toBe(false);
    expect(calls.count).toBe(2);
  });

  it('events (hono-idempotency’s onCacheHit / onCacheMiss): claimed on the first request, replayed on the retry, only unkeyed without a key, none on GET; a throwing hook changes nothing', async () => {
    const events: IdempotencyEvent[] = [];
    const { request, app } = createApp({
      required: false,
      onEvent: (event) => {
        events.push(event);
        throw new Error('hook exploded');
      },
    });
    const key = newKey();
    expect((await request('/api/text', { key })).status).toBe(200);
    expect((await read(await request('/api/text', { key }))).replayed).toBe(true);
    await request('/api/text');
    await app.request('/api/get', { headers: { 'idempotency-key': newKey() } });
    const mine = events.filter((event) => event.key === key).map((event) => event.type);
    expect(mine).toEqual(['claimed', 'completed', 'replayed']);
    expect(events.filter((event) => event.key !== key)).toEqual([
      { type: 'unkeyed', operation: 'POST /api/text', refused: false },
    ]);
  });

  it('F3: no replayed event on a fingerprint mismatch, a mismatch event instead', async () => {
    const events: IdempotencyEvent[] = [];
    const { request } = createApp({ onEvent: (event) => events.push(event) });
    const key = newKey();
    await request('/api/create', { key, body: { a: 1 } });
    await request('/api/create', { key, body: { a: 2 } });
    expect(events.map((event) => event.type)).toEqual(['claimed', 'completed', 'mismatch']);
  });

  it('K1 (differs on purpose: the header is the draft’s Idempotency-Key, not configurable): another header is not a key', async () => {
    const { request, calls } = createApp({ required: false });
    await request('/api/text', { headers: { 'x-request-id': 'key-ignored' } });
    expect((await read(await request('/api/text', { headers: { 'x-request-id': 'key-ignored' } }))).replayed).toBe(
      false,
    );
    expect(calls.count).toBe(2);
  });

  it('E4 (differs on purpose): a handler that throws a non-Error has it stored; Hono rethrows it the first time, and the replay rethrows the stored error for app.onError', async () => {
    const { app } = createApp();
    let calls = 0;
    app.post('/api/throw-string', () => {
      calls++;
      throw 'non-error value';
    });
    const key = newKey();
    const send = () => app.request('/api/throw-string', { method: 'POST', headers: { 'idempotency-key': key } });
    await expect(send()).rejects.toBe('non-error value');
    const replay = await read(await send());
    expect([replay.status, replay.json]).toEqual([500, { error: 'non-error value' }]);
    expect(calls).toBe(1);
    expect(await store.get(formatScope('POST /api/throw-string', 'public'), key)).toMatchObject({
      state: 'completed',
      outcome: { kind: 'error', status: 500 },
    });
  });
});
