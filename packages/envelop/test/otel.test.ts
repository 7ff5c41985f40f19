/**
 * `@idem/core/otel` under the Yoga plugin, on the Drizzle store on SQLite: each request runs inside
 * a server span (as an HTTP instrumentation starts it), and the real SDK's in-memory exporters
 * show what idem counted and what it said on the span, for a fresh call, a replay, a conflict and
 * a mismatch.
 */
import { randomUUID } from 'node:crypto';
import { createYoga } from 'graphql-yoga';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { IdempotencyStore } from '@idem/core';
import { IDEMPOTENCY_EVENTS_METRIC, idempotencyTelemetry } from '@idem/core/otel';
import { counted, useOpenTelemetrySdk } from '../../core/test/otel-sdk.ts';
import { useYogaIdempotency } from '../src/index.ts';
import { graphqlClient, type GraphQLResponse } from './fixtures/http.ts';
import { createShop } from './fixtures/shop.ts';
import { storeTargets } from './fixtures/stores.ts';

const sdk = useOpenTelemetrySdk();
const sqlite = storeTargets.find((target) => target.name === 'SQLite')!;

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

const CREATE_ORDER = /* GraphQL */ `
  mutation CreateOrder($input: OrderInput!) {
    createOrder(input: $input) { id amount }
  }
`;

/** The shop's schema under Yoga with the plugin, its events turned into this test's metrics and spans. */
function tracedShop(store: IdempotencyStore, { required }: { required?: boolean }) {
  const shop = createShop();
  const yoga = createYoga({
    schema: shop.schema,
    logging: false,
    plugins: [
      useYogaIdempotency({
        store,
        principal: ({ request }) => request.headers.get('x-user') ?? 'anonymous',
        ...(required === undefined ? {} : { required }),
        onEvent: idempotencyTelemetry({ meter: sdk.meterProvider.getMeter('test') }),
      }),
    ],
  });
  return { shop, post: graphqlClient((url, init) => yoga.fetch(url, init)) };
}

describe('@idem/core/otel with @idem/envelop through GraphQL Yoga (SQLite)', () => {
  it('a fresh call, its replay, a conflict and a mismatch: counters by event and operation, spans that say replayed or not', async () => {
    const opened = await sqlite.open();
    cleanups.push(opened.close);
    const { shop, post } = tracedShop(opened.store, {});
    const key = randomUUID();
    const answers: Record<string, GraphQLResponse> = {};
    const call = (name: string, amount: number) =>
      sdk.inRequestSpan(name, async () => {
        answers[name] = await post(
          { query: CREATE_ORDER, variables: { input: { amount, currency: 'EUR' } } },
          { 'idempotency-key': `"${key}"`, 'x-user': 'principal-42' },
        );
      });

    const release = shop.hold();
    const fresh = call('fresh', 10);
    await vi.waitFor(() => expect(shop.calls.createOrder).toBe(1));
    const conflict = await call('conflict', 10);
    release();
    const executed = await fresh;
    const replay = await call('replay', 10);
    const mismatch = await call('mismatch', 99);

    expect(Object.fromEntries(Object.entries(answers).map(([name, answer]) => [name, answer.status]))).toEqual({
      fresh: 200,
      conflict: 409,
      replay: 200,
      mismatch: 422,
    });
    expect(shop.calls.createOrder).toBe(1);

    const operation = executed['idempotency.operation'];
    expect(operation).toBe('mutation:createOrder');
    const base = { 'idempotency.key_present': true, 'idempotency.operation': operation };
    expect(executed).toEqual({ ...base, 'idempotency.replayed': false, 'idempotency.outcome': 'executed' });
    expect(replay).toEqual({ ...base, 'idempotency.replayed': true, 'idempotency.outcome': 'replayed' });
    expect(conflict).toEqual({ ...base, 'idempotency.outcome': 'conflict' });
    expect(mismatch).toEqual({ ...base, 'idempotency.outcome': 'mismatch' });

    const metrics = await sdk.collected();
    expect(counted(metrics.get(IDEMPOTENCY_EVENTS_METRIC))).toEqual([
      `claimed ${operation} = 1`,
      `completed ${operation} = 1`,
      `conflict ${operation} = 1`,
      `mismatch ${operation} = 1`,
      `replayed ${operation} = 1`,
    ]);
    const exported = JSON.stringify([
      sdk.spans.getFinishedSpans().map((span) => span.attributes),
      [...metrics.values()].map((metric) => metric.dataPoints),
    ]);
    expect(exported).not.toContain('principal-42');
    expect(exported).not.toContain(key);
  });

  it('K2: a mutation without a key says key_present false on its span, refused (key_missing) or run without idempotency (unkeyed)', async () => {
    const opened = await sqlite.open();
    cleanups.push(opened.close);
    const seen: Record<string, unknown> = {};
    for (const required of [true, false]) {
      const { shop, post } = tracedShop(opened.store, { required });
      const span = await sdk.inRequestSpan(`unkeyed-${required}`, async () => {
        const answer = await post({ query: CREATE_ORDER, variables: { input: { amount: 10, currency: 'EUR' } } });
        seen[`status-${required}`] = answer.status;
      });
      seen[`runs-${required}`] = shop.calls.createOrder ?? 0;
      expect(span).toEqual({
        'idempotency.key_present': false,
        'idempotency.operation': 'mutation:createOrder',
        'idempotency.replayed': false,
        'idempotency.outcome': required ? 'key_missing' : 'unkeyed',
      });
    }
    expect(seen).toEqual({ 'status-true': 400, 'runs-true': 0, 'status-false': 200, 'runs-false': 1 });
    const metrics = await sdk.collected();
    // A mutation run without a key adds no operation label of its own: `(other)` (its app saw no other request).
    expect(counted(metrics.get(IDEMPOTENCY_EVENTS_METRIC))).toEqual([
      'unkeyed (other) = 1',
      'unkeyed mutation:createOrder = 1',
    ]);
  });
});
