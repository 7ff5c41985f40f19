/**
 * `@idem/core/otel` on plain HTTP routes: the `idempotency.operation` label of the metrics is
 * bounded — the Hono route template, at most `maxOperations` values then `(other)`, and requests
 * without a key add none — so made-up paths full of ids, e-mail addresses or tokens never become
 * series (K5).
 */
import { randomUUID } from 'node:crypto';
import { Hono } from 'hono';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { IdempotencyStore } from '@idem/core';
import { IDEMPOTENCY_EVENTS_METRIC, idempotencyTelemetry, OTHER_OPERATION } from '@idem/core/otel';
import { idempotent } from '@idem/fetch';
import { idempotency } from '@idem/fetch/hono';
import { useOpenTelemetrySdk } from '../../core/test/otel-sdk.ts';
import { sqliteTarget } from './support.ts';

const sdk = useOpenTelemetrySdk();
const ORIGIN = 'http://localhost:3000';

const post = (path: string, key?: string) =>
  new Request(`${ORIGIN}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key ? { 'idempotency-key': key } : {}) },
    body: '{"amount":1}',
  });

async function operationLabels(): Promise<Set<unknown>> {
  const metric = (await sdk.collected()).get(IDEMPOTENCY_EVENTS_METRIC);
  return new Set(metric?.dataPoints.map(({ attributes }) => attributes['idempotency.operation']));
}

describe('bounded telemetry labels with @idem/fetch (SQLite)', () => {
  let store: IdempotencyStore;
  let close: () => Promise<void>;
  beforeAll(async () => ({ store, close } = await sqliteTarget.open()));
  afterAll(() => close());

  it('K5: under Hono, 200 made-up ids, e-mail addresses and tokens in the path label one operation, the route template', async () => {
    const app = new Hono();
    const onEvent = idempotencyTelemetry({ meter: sdk.meterProvider.getMeter('test') });
    app.post('/users/:id/orders', idempotency({ store, principal: () => 'alice', required: false, onEvent }), (c) =>
      c.json({}, 201),
    );
    for (let i = 0; i < 100; i++) {
      await app.fetch(post(`/users/${encodeURIComponent(`user${i}@example.com`)}/orders`, randomUUID()));
      await app.fetch(post(`/users/tok_${randomUUID()}/orders`));
    }
    expect(await operationLabels()).toEqual(new Set(['POST /users/:id/orders']));
  });

  it('K5: idempotent() on raw paths labels at most maxOperations operations, then (other); unkeyed requests add none', async () => {
    const onEvent = idempotencyTelemetry({ meter: sdk.meterProvider.getMeter('test'), maxOperations: 5 });
    const handler = idempotent(async () => Response.json({}, { status: 201 }), {
      store,
      principal: () => 'alice',
      required: false,
      onEvent,
    });
    for (let i = 0; i < 50; i++) {
      await handler(post(`/orders/${i}`, randomUUID()));
      await handler(post(`/unkeyed/${i}`));
    }
    const labels = await operationLabels();
    expect(labels.size).toBe(6);
    expect(labels).toContain(OTHER_OPERATION);
    expect([...labels].some((label) => String(label).startsWith('POST /unkeyed/'))).toBe(false);
  });
});
