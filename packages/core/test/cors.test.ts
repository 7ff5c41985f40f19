/**
 * idempotencyCors / idempotencyCorsHeaders: the configuration and the headers they answer with.
 * The transports (tRPC fetch adapter, the `cors` package, Yoga) are tested over HTTP where they
 * are served: packages/trpc/test/cors.test.ts and examples/payments/test/cors.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { idempotencyCors, idempotencyCorsHeaders } from '../src/http-entry.ts';

const preflight = (origin: string) =>
  new Request('http://api.test/trpc/pay', {
    method: 'OPTIONS',
    headers: {
      origin,
      'access-control-request-method': 'POST',
      'access-control-request-headers': 'idempotency-key,content-type',
    },
  });
const post = (origin: string) => new Request('http://api.test/trpc/pay', { method: 'POST', headers: { origin } });

describe('idempotencyCors', () => {
  it('allows Idempotency-Key, Content-Type and Authorization and exposes Idempotent-Replayed, Idempotent-Resumable (E8) and Retry-After, plus your own', () => {
    expect({
      ...idempotencyCors({
        origin: 'https://shop.example.com',
        allowedHeaders: ['trpc-accept', 'content-type'],
        exposedHeaders: ['x-request-id'],
      }),
    }).toEqual({
      origin: ['https://shop.example.com'],
      methods: ['GET', 'POST'],
      allowedHeaders: ['Idempotency-Key', 'Content-Type', 'Authorization', 'trpc-accept'],
      exposedHeaders: ['Idempotent-Replayed', 'Idempotent-Resumable', 'Retry-After', 'x-request-id'],
      credentials: false,
      maxAge: 600,
    });
  });

  it.each([
    ['a path', 'https://shop.example.com/checkout', /is not an origin/],
    ['no scheme', 'shop.example.com', /is not an origin/],
    ['a trailing slash', 'https://shop.example.com/', /is not an origin/],
  ])('refuses an origin with %s', (_, origin, message) => {
    expect(() => idempotencyCors({ origin })).toThrow(message);
  });

  it("refuses no origin, '*' beside others, and '*' with credentials", () => {
    expect(() => idempotencyCors({ origin: [] })).toThrow(/at least one origin/);
    expect(() => idempotencyCors({ origin: ['*', 'https://a.example'] })).toThrow(/'\*' alone/);
    expect(() => idempotencyCors({ origin: '*', credentials: true })).toThrow(/refuse credentials/);
  });
});

describe('idempotencyCorsHeaders', () => {
  const cors = idempotencyCors({ origin: ['https://shop.example.com', 'http://localhost:3001'], credentials: true });

  it('answers a preflight from an allowed origin with the methods, the headers and the max age', () => {
    expect(idempotencyCorsHeaders(preflight('http://localhost:3001'), cors)).toEqual({
      Vary: 'Origin',
      'Access-Control-Allow-Origin': 'http://localhost:3001',
      'Access-Control-Allow-Credentials': 'true',
      'Access-Control-Allow-Methods': 'GET, POST',
      'Access-Control-Allow-Headers': 'Idempotency-Key, Content-Type, Authorization',
      'Access-Control-Max-Age': '600',
    });
  });

  it('exposes the headers on the actual response', () => {
    expect(idempotencyCorsHeaders(post('https://shop.example.com'), cors)).toMatchObject({
      'Access-Control-Allow-Origin': 'https://shop.example.com',
      'Access-Control-Expose-Headers': 'Idempotent-Replayed, Idempotent-Resumable, Retry-After',
    });
  });

  it('gives an origin that is not allowed no Access-Control-Allow-Origin, and a request without Origin nothing', () => {
    expect(idempotencyCorsHeaders(preflight('https://evil.example'), cors)).toEqual({ Vary: 'Origin' });
    expect(idempotencyCorsHeaders(new Request('http://api.test/trpc/pay', { method: 'POST' }), cors)).toEqual({});
  });

  it("answers any origin with '*' and no Vary", () => {
    expect(idempotencyCorsHeaders(post('https://anyone.example'), idempotencyCors({ origin: '*' }))).toEqual({
      'Access-Control-Allow-Origin': '*',
      'Access-Control-Expose-Headers': 'Idempotent-Replayed, Idempotent-Resumable, Retry-After',
    });
  });
});
