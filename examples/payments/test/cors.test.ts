/**
 * CORS on both transports of the example, over real HTTP: the `cors` package (as with tRPC's
 * standalone adapter) on /trpc and the policy, GraphQL Yoga's `cors` option on /graphql, both
 * configured by `idempotencyCors({ origin: CORS_ORIGIN })` from @idem/core. A browser on an
 * allowed origin may send Idempotency-Key, Content-Type and Authorization (preflight) and can
 * read Idempotent-Replayed and Retry-After (exposed).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase, type OpenedDatabase } from '@idem/drizzle/connect';
import { ConfigError, readConfig } from '../src/config.ts';
import { migrateExample, newKey, startExample, type RunningExample } from './http.ts';

const SHOP = 'http://shop.localhost:3001';
const OTHER = 'http://evil.localhost:4000';
const REQUESTED = 'authorization,content-type,idempotency-key';

let directory: string;
let opened: OpenedDatabase;
const running: RunningExample[] = [];

beforeAll(async () => {
  directory = mkdtempSync(join(tmpdir(), 'idem-example-cors-'));
  opened = await openDatabase(`file:${join(directory, 'payments.db')}`);
  await migrateExample(opened.db);
});
afterAll(async () => {
  for (const example of running) await example.close();
  await opened?.close();
  rmSync(directory, { recursive: true, force: true });
});

async function start(env: Record<string, string>) {
  const example = await startExample(opened.db, { CHANNEL_DELAY_MS: '300', ...env });
  running.push(example);
  return example;
}

const preflight = (url: string, origin: string, method = 'POST') =>
  fetch(url, {
    method: 'OPTIONS',
    headers: { origin, 'access-control-request-method': method, 'access-control-request-headers': REQUESTED },
  });
const lower = (list: string | null) =>
  (list ?? '')
    .toLowerCase()
    .split(/\s*,\s*/)
    .filter(Boolean);
const payTrpc = (url: string, key: string, origin = SHOP) =>
  fetch(`${url}/trpc/payments.create`, {
    method: 'POST',
    headers: { origin, 'content-type': 'application/json', 'idempotency-key': key, authorization: 'Bearer alice' },
    body: '{"amount":4200,"currency":"EUR"}',
  });
const payGraphql = (url: string, key: string, origin = SHOP) =>
  fetch(`${url}/graphql`, {
    method: 'POST',
    headers: { origin, 'content-type': 'application/json', 'idempotency-key': key, authorization: 'Bearer alice' },
    body: JSON.stringify({ query: 'mutation { createPayment(input: {amount: 4200, currency: "EUR"}) { id } }' }),
  });

describe.each([
  ['tRPC (/trpc, the cors package)', '/trpc/payments.create', payTrpc],
  ['GraphQL (/graphql, Yoga cors)', '/graphql', payGraphql],
] as const)('CORS_ORIGIN on %s', (_, path, pay) => {
  it('answers the preflight of an allowed origin: Idempotency-Key, Content-Type and Authorization allowed', async () => {
    const { url } = await start({ CORS_ORIGIN: `${SHOP},http://127.0.0.1:3001` });
    const response = await preflight(`${url}${path}`, SHOP);
    expect(response.status).toBe(204);
    expect(response.headers.get('access-control-allow-origin')).toBe(SHOP);
    expect(lower(response.headers.get('access-control-allow-methods'))).toContain('post');
    expect(lower(response.headers.get('access-control-allow-headers'))).toEqual(
      expect.arrayContaining(['idempotency-key', 'content-type', 'authorization']),
    );
    expect(lower(response.headers.get('vary'))).toContain('origin');
  });

  it('E2/E3: exposes Idempotent-Replayed on a replay and Retry-After on a 409, so a page on the allowed origin can read them', async () => {
    const { url, events } = await start({ CORS_ORIGIN: SHOP });
    const key = newKey();
    const first = pay(url, key);
    // Once the first call has claimed the key (the channel then takes 300 ms), the same key is a 409.
    while (!events.some((event) => event.type === 'claimed' && event.key === key))
      await new Promise((resolve) => setTimeout(resolve, 5));
    const conflict = await pay(url, key);
    expect(conflict.status).toBe(409);
    expect(conflict.headers.get('retry-after')).toMatch(/^\d+$/);
    expect(lower(conflict.headers.get('access-control-expose-headers'))).toEqual(
      expect.arrayContaining(['idempotent-replayed', 'retry-after']),
    );
    expect((await first).status).toBe(200);

    const replay = await pay(url, key);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.headers.get('access-control-allow-origin')).toBe(SHOP);
    expect(lower(replay.headers.get('access-control-expose-headers'))).toEqual(
      expect.arrayContaining(['idempotent-replayed', 'retry-after']),
    );
  });

  it.each([OTHER, 'null'])(
    'gives an origin it does not allow (%s) no Access-Control-Allow-Origin at all: the browser blocks it',
    async (origin) => {
      // Two origins: a list, which Yoga alone answered with the literal `null` (a sandboxed iframe's origin).
      const { url } = await start({ CORS_ORIGIN: `${SHOP},http://127.0.0.1:3001` });
      const response = await preflight(`${url}${path}`, origin);
      expect(response.headers.get('access-control-allow-origin')).toBeNull();
      expect(response.headers.get('access-control-allow-credentials')).toBeNull();
      const paid = await pay(url, newKey(), origin);
      expect(paid.headers.get('access-control-allow-origin')).toBeNull();
      // tRPC sets its own Vary on its answers; on /graphql the example adds Origin (Yoga would not).
      if (path === '/graphql') expect(lower(paid.headers.get('vary'))).toContain('origin');
    },
  );

  it('sends no CORS headers without CORS_ORIGIN (Yoga would otherwise allow every origin)', async () => {
    const { url } = await start({});
    const response = await preflight(`${url}${path}`, SHOP);
    expect(response.headers.get('access-control-allow-origin')).toBeNull();
    expect((await pay(url, newKey())).headers.get('access-control-allow-origin')).toBeNull();
  });
});

describe('CORS_ORIGIN on the published policy', () => {
  it('R4: a page on the allowed origin can read /idempotency (idempotencyLink fetches it)', async () => {
    const { url } = await start({ CORS_ORIGIN: SHOP });
    const response = await fetch(`${url}/idempotency`, { headers: { origin: SHOP, accept: 'application/json' } });
    expect(response.status).toBe(200);
    expect(response.headers.get('access-control-allow-origin')).toBe(SHOP);
    expect((await response.json()).endpoints.length).toBeGreaterThan(0);
  });
});

describe('CORS_ORIGIN configuration', () => {
  it.each(['shop.localhost', 'http://shop.localhost:3001/checkout', '*,http://a.example'])(
    'refuses %j with a ConfigError naming the variable',
    (value) => {
      expect(() => readConfig({ CORS_ORIGIN: value })).toThrow(ConfigError);
      expect(() => readConfig({ CORS_ORIGIN: value })).toThrow(
        /^CORS_ORIGIN must be a comma-separated list of origins/,
      );
    },
  );

  it('reads a comma-separated list', () => {
    expect(readConfig({ CORS_ORIGIN: ' http://localhost:3001 , https://shop.example.com' }).corsOrigins).toEqual([
      'http://localhost:3001',
      'https://shop.example.com',
    ]);
  });
});
