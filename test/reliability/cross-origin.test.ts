/**
 * CORS as a browser judges it, against the real hosts: GraphQL Yoga's `cors` (through
 * `yoga.fetch`) and the `cors` package in front of a Node HTTP server, both given
 * `idempotencyCors(…)` as they are. The oracle is the browser's CORS check (Fetch §3.2.5): a
 * page may read an answer, or send the request a preflight asked about, only when
 * `Access-Control-Allow-Origin` is `*` or exactly the page's origin — with credentials, exactly
 * the page's origin and `Access-Control-Allow-Credentials: true`. A page in a sandboxed iframe, or
 * on a `data:` URL, has the origin `null`, and `Access-Control-Allow-Origin: null` matches it.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import cors from 'cors';
import fc from 'fast-check';
import { createSchema, createYoga } from 'graphql-yoga';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { idempotencyCors, idempotencyCorsHeaders, type IdempotencyCorsConfiguration } from '@idem/core/http';

const ORIGINS = [
  'https://shop.example',
  'http://localhost:3001',
  'https://admin.example:8443',
  'http://127.0.0.1:3001',
];
const STRANGERS = ['null', 'https://evil.example', 'http://localhost:3002', 'https://shop.example.evil', 'file://'];

/** The browser's verdict on one answer for a page on `origin`. */
function browserAllows(headers: Headers, origin: string, credentials: boolean): boolean {
  const allowed = headers.get('access-control-allow-origin');
  if (credentials) return allowed === origin && headers.get('access-control-allow-credentials') === 'true';
  return allowed === '*' || allowed === origin;
}

const yogaWith = (configuration: IdempotencyCorsConfiguration) =>
  createYoga({
    cors: configuration,
    logging: false,
    schema: createSchema({ typeDefs: 'type Query { ok: Boolean! }', resolvers: { Query: { ok: () => true } } }),
  });

let corsServer: Server;
let corsUrl = '';
/** The configuration the Node server's `cors` middleware runs with, set per run. */
let current: IdempotencyCorsConfiguration;

beforeAll(async () => {
  corsServer = createServer((req, res) => {
    cors(current)(req, res, () => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"ok":true}');
    });
  });
  await new Promise<void>((resolve) => corsServer.listen(0, '127.0.0.1', resolve));
  corsUrl = `http://127.0.0.1:${(corsServer.address() as AddressInfo).port}`;
});
afterAll(async () => {
  corsServer.closeAllConnections();
  await new Promise((resolve) => corsServer.close(resolve));
});

const preflightHeaders = (origin: string) => ({
  origin,
  'access-control-request-method': 'POST',
  'access-control-request-headers': 'authorization,content-type,idempotency-key',
});

const cases = fc.record({
  allowed: fc.uniqueArray(fc.constantFrom(...ORIGINS), { minLength: 1, maxLength: 4 }),
  credentials: fc.boolean(),
  origin: fc.constantFrom(...ORIGINS, ...STRANGERS),
  preflight: fc.boolean(),
});
const runs = { seed: 20_261_201, numRuns: 150, interruptAfterTimeLimit: 60_000, markInterruptAsFailure: true };

describe('idempotencyCors on the real hosts, judged as a browser judges', () => {
  it('CORS: through GraphQL Yoga, a page may read an answer exactly when its origin is on the list — a sandboxed page (Origin: null) never', async () => {
    await fc.assert(
      fc.asyncProperty(cases, async ({ allowed, credentials, origin, preflight }) => {
        const yoga = yogaWith(idempotencyCors({ origin: allowed, credentials }));
        const response = await yoga.fetch(
          preflight
            ? new Request('http://api.test/graphql', { method: 'OPTIONS', headers: preflightHeaders(origin) })
            : new Request('http://api.test/graphql?query=%7Bok%7D', { headers: { origin } }),
        );
        expect(browserAllows(response.headers, origin, credentials)).toBe(allowed.includes(origin));
        if (!allowed.includes(origin)) {
          expect(response.headers.get('access-control-allow-origin')).toBeNull();
          expect(response.headers.get('access-control-allow-credentials')).toBeNull();
        }
      }),
      runs,
    );
  });

  it('CORS: through the cors package (tRPC standalone, Express), and idempotencyCorsHeaders (Fetch handlers), the same', async () => {
    await fc.assert(
      fc.asyncProperty(cases, async ({ allowed, credentials, origin, preflight }) => {
        current = idempotencyCors({ origin: allowed, credentials });
        const request = preflight
          ? new Request(`${corsUrl}/trpc/pay`, { method: 'OPTIONS', headers: preflightHeaders(origin) })
          : new Request(`${corsUrl}/trpc/pay`, { headers: { origin } });
        const response = await fetch(request);
        await response.arrayBuffer();
        expect(browserAllows(response.headers, origin, credentials)).toBe(allowed.includes(origin));
        const fetchHandler = new Headers(idempotencyCorsHeaders(request, current));
        expect(browserAllows(fetchHandler, origin, credentials)).toBe(allowed.includes(origin));
      }),
      runs,
    );
  });

  it('CORS: the configuration hands the cors package its list and Yoga one origin per request, and reads as its options', () => {
    const configuration = idempotencyCors({ origin: [ORIGINS[0]!, ORIGINS[1]!], credentials: true });
    expect(configuration.origin).toEqual([ORIGINS[0], ORIGINS[1]]);
    expect(configuration(new Request('http://api.test/', { headers: { origin: 'null' } }))).toBe(false);
    expect(configuration(new Request('http://api.test/'))).toBe(false);
    expect(configuration(new Request('http://api.test/', { headers: { origin: ORIGINS[1]! } }))).toMatchObject({
      origin: ORIGINS[1],
      credentials: true,
    });
    let handed: unknown;
    configuration({}, (_error, options) => (handed = options));
    expect(handed).toMatchObject({ origin: [ORIGINS[0], ORIGINS[1]], credentials: true });
  });
});
