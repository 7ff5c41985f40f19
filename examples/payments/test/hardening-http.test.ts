/**
 * Hardening (issue 14): defects an adversarial black-box pass found in the payments example,
 * black-box over real HTTP. Each test failed before its fix.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createDrizzleStore } from '@idem/drizzle';
import { openDatabase, type OpenedDatabase } from '@idem/drizzle/connect';
import { holdSqliteWriteLock, type HeldLock } from '../../../packages/drizzle/test/sqlite-lock.ts';
import { openSqliteTarget, type SqliteTarget } from '../../../packages/drizzle/test/sqlite-target.ts';
import { ExampleFleet } from '../../../test/reliability/support/example-server.ts';
import {
  get,
  graphql,
  ledger,
  migrateExample,
  mutate,
  newKey,
  startExample,
  type Reply,
  type RunningExample,
} from './http.ts';

const PAYMENT = { amount: 4200, currency: 'EUR' };

/** Records when `promise` settles, without changing it. */
function tracked<T>(promise: Promise<T>) {
  const state = { settled: false, promise };
  promise.then(
    () => (state.settled = true),
    () => (state.settled = true),
  );
  return state;
}

describe('the example on SQLite while another process holds the write lock (issue 14, item 5)', () => {
  let directory: string;
  let file: string;
  let opened: OpenedDatabase;
  let lock: HeldLock | undefined;
  const running: RunningExample[] = [];

  beforeAll(async () => {
    directory = mkdtempSync(join(tmpdir(), 'idem-example-busy-'));
    file = join(directory, 'payments.db');
    // As main.ts opens it.
    opened = await openDatabase(`file:${file}`);
    await migrateExample(opened.db);
  });
  afterEach(() => {
    lock?.kill();
    lock = undefined;
  });
  afterAll(async () => {
    for (const example of running) await example.close();
    await opened?.close();
    rmSync(directory, { recursive: true, force: true });
  });

  const start = async (busyRetryMs: number) => {
    const example = await startExample(opened.db, {}, { store: createDrizzleStore(opened.db, { busyRetryMs }) });
    running.push(example);
    return example;
  };

  it('E2/R4: /healthz, /idempotency and a replay are answered while a new payment waits for the lock, and the payment is charged once it is released', async () => {
    const { url } = await start(30_000);
    const paid = newKey();
    const first = await mutate(url, 'payments.create', PAYMENT, { 'idempotency-key': paid });
    expect(first.status).toBe(200);
    const before = await ledger(url);

    lock = await holdSqliteWriteLock(file);
    const waiting = tracked(mutate(url, 'payments.create', PAYMENT, { 'idempotency-key': newKey() }));
    const health = await get(url, '/healthz');
    const policy = await get(url, '/idempotency', { accept: 'application/json' });
    const replay = await mutate(url, 'payments.create', PAYMENT, { 'idempotency-key': paid });
    expect([health.status, policy.status, replay.status]).toEqual([200, 200, 200]);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.text).toBe(first.text);
    expect(waiting.settled).toBe(false);

    await lock.release();
    const payment: Reply = await waiting.promise;
    expect(payment.status).toBe(200);
    expect(payment.headers.get('idempotent-replayed')).toBeNull();
    expect(await ledger(url)).toHaveLength(before.length + 1);
  });

  it('E5: a payment that cannot get the lock in time is answered 503 with Retry-After without holding up /healthz, and nothing is charged; the next retry executes', async () => {
    const { url } = await start(200);
    const before = await ledger(url);
    const key = newKey();
    lock = await holdSqliteWriteLock(file);
    const refusing = tracked(mutate(url, 'payments.create', PAYMENT, { 'idempotency-key': key }));
    expect((await get(url, '/healthz')).status).toBe(200);
    expect(refusing.settled).toBe(false);
    const refused = await refusing.promise;
    expect(refused.status).toBe(503);
    expect(refused.headers.get('retry-after')).toBe('2');
    expect(refused.body.error.data.idempotency).toMatchObject({ code: 'idempotency_store_unavailable' });
    await lock.release();
    expect(await ledger(url)).toHaveLength(before.length);
    expect((await mutate(url, 'payments.create', PAYMENT, { 'idempotency-key': key })).status).toBe(200);
    expect(await ledger(url)).toHaveLength(before.length + 1);
  });
});

/** Sends `request` as raw bytes and answers the response's status line and the rest, as received. */
function rawRequest(url: string, request: string): Promise<{ statusLine: string; text: string }> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname);
    let text = '';
    socket.setEncoding('latin1');
    socket.on('data', (chunk) => (text += chunk));
    socket.on('error', reject);
    socket.on('close', () => resolve({ statusLine: text.split('\r\n')[0] ?? '', text }));
    socket.end(request);
  });
}

describe('npm start with a request target that is not a URL (issue 14, item 1)', () => {
  const fleet = new ExampleFleet();
  let directory: string;
  beforeAll(() => {
    directory = mkdtempSync(join(tmpdir(), 'idem-example-target-'));
  });
  afterAll(async () => {
    await fleet.killAll();
    rmSync(directory, { recursive: true, force: true });
  });

  it('answers `GET http://[` with 400 problem+json, keeps running, and serves the next request', async () => {
    const server = await fleet.start({ databaseUrl: `file:${join(directory, 'payments.db')}` });
    const answer = await rawRequest(
      server.url,
      'GET http://[ HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n',
    );
    expect(answer.statusLine).toBe('HTTP/1.1 400 Bad Request');
    expect(answer.text).toMatch(/content-type: application\/problem\+json/i);
    expect(answer.text).toContain('"detail":"The request target is not a valid URL."');
    expect(server.exited).toBe(false);
    expect((await get(server.url, '/healthz')).status).toBe(200);
  });
});

describe('the example behind its front door (issue 14, items 6 and 11)', () => {
  let target: SqliteTarget;
  let example: RunningExample;
  beforeAll(async () => {
    target = await openSqliteTarget();
    await migrateExample(target.db);
    example = await startExample(target.db);
  });
  afterAll(async () => {
    await example?.close();
    await target?.close();
  });

  /** A valid payment padded with an unknown field to `bytes` of JSON: the schema would strip the field. */
  const padded = (bytes: number) => JSON.stringify({ ...PAYMENT, padding: 'x'.repeat(bytes) });

  it('item 6: a tRPC body over the 64 KiB limit is refused with 413 PAYLOAD_TOO_LARGE, with or without Content-Length, and nothing is charged', async () => {
    const before = await ledger(example.url);
    const post = (body: BodyInit, extra: RequestInit = {}) =>
      fetch(`${example.url}/trpc/payments.create`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': newKey() },
        body,
        ...extra,
      });
    const sized = await post(padded(1024 * 1024));
    expect(sized.status).toBe(413);
    expect((await sized.json()).error.data).toMatchObject({ code: 'PAYLOAD_TOO_LARGE', httpStatus: 413 });
    const chunks = [padded(1024 * 1024)];
    const streamed = await post(
      new ReadableStream({
        pull: (controller) =>
          chunks.length ? controller.enqueue(new TextEncoder().encode(chunks.shift()!)) : controller.close(),
      }),
      { duplex: 'half' } as RequestInit,
    );
    expect(streamed.status).toBe(413);
    expect(await ledger(example.url)).toEqual(before);
    // Under the limit, the same request goes through.
    expect((await post(padded(1024))).status).toBe(200);
  });

  it('item 6: a GraphQL body over the 64 KiB limit is refused with 413, and nothing is charged', async () => {
    const before = await ledger(example.url);
    const query = 'mutation Pay($input: PaymentInput!) { createPayment(input: $input) { id } }';
    const response = await fetch(`${example.url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': newKey() },
      // graphql-js ignores a variable the operation does not declare.
      body: JSON.stringify({ query, variables: { input: PAYMENT, padding: 'x'.repeat(1024 * 1024) } }),
    });
    expect(response.status).toBe(413);
    expect(await ledger(example.url)).toEqual(before);
  });

  it.each([
    ['Basic credentials', 'Basic YWxpY2U6c2VjcmV0'],
    ['a bare token', 'alice'],
    ['Bearer without a token', 'Bearer'],
    ['a Bearer value with a space', 'Bearer ali ce'],
    ['an empty header', ''],
  ])(
    "item 11: %s get 401 with WWW-Authenticate on tRPC and GraphQL, never the public account's stored response",
    async (_what, authorization) => {
      const key = newKey();
      const anonymous = await mutate(example.url, 'payments.create', PAYMENT, { 'idempotency-key': key });
      expect(anonymous.status).toBe(200);
      const before = await ledger(example.url);

      const trpc = await mutate(example.url, 'payments.create', PAYMENT, { 'idempotency-key': key, authorization });
      expect(trpc.status).toBe(401);
      expect(trpc.headers.get('www-authenticate')).toBe('Bearer realm="payments"');
      expect(trpc.headers.get('idempotent-replayed')).toBeNull();
      expect(trpc.text).not.toContain(anonymous.body.result.data.id);

      const query =
        'mutation Pay($input: PaymentInput!, $key: String) { createPayment(input: $input, idempotencyKey: $key) { id } }';
      const byGraphql = await graphql(example.url, query, {
        variables: { input: PAYMENT, key },
        headers: { authorization },
      });
      expect(byGraphql.status).toBe(401);
      expect(byGraphql.headers.get('www-authenticate')).toBe('Bearer realm="payments"');
      expect(await ledger(example.url)).toEqual(before);
    },
  );
});
