/**
 * Per-mutation policy by schema coordinate (R1, E6, R2, R4): `policy: { 'Mutation.refund': … }`
 * reaches the record each unit stores — so the timeline shows it — and the published policy,
 * through GraphQL Yoga on every store (memory, SQLite, PostgreSQL).
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createYoga } from 'graphql-yoga';
import { createPolicyDocument, formatScope, MemoryStore } from '@idem/core';
import { useYogaIdempotency } from '../src/index.ts';
import { createShop } from './fixtures/shop.ts';
import { graphqlClient } from './fixtures/http.ts';
import { storeTargets, type OpenStore } from './fixtures/stores.ts';

const HOUR = 3_600_000;
const policy = { 'Mutation.refund': { retention: '72h', lease: '2m', wait: '5s', expiredReuse: 'reject' } } as const;

describe.each(storeTargets)('per-mutation policy over $name', (target) => {
  let opened: OpenStore;
  beforeAll(async () => {
    opened = await target.open();
  });
  afterAll(async () => {
    await opened?.close();
  });

  const app = () => {
    const shop = createShop();
    const idempotency = useYogaIdempotency({ store: opened.store, principal: () => 'alice', retention: '24h', policy });
    const yoga = createYoga({ schema: shop.schema, logging: false, plugins: [idempotency] });
    return { idempotency, post: graphqlClient((url, init) => yoga.fetch(url, init)) };
  };
  const retentionOf = async (scope: string, key: string) => {
    const [entry] = await opened.store.timeline(scope, key);
    return { retention: entry!.expiresAt.getTime() - entry!.completedAt!.getTime(), entry: entry! };
  };

  it('R1/A1: a field key on Mutation.refund is kept 72 hours, another mutation the plugin’s 24; the timeline shows it', async () => {
    const { post } = app();
    const [refundKey, orderKey] = [randomUUID(), randomUUID()];
    await post({ query: `mutation { refund(amount: 5, idempotencyKey: "${refundKey}") { id } }` });
    await post({
      query: `mutation { createOrder(input: { amount: 5, currency: "EUR" }, idempotencyKey: "${orderKey}") { id } }`,
    });

    const refund = await retentionOf(formatScope('Mutation.refund', 'alice'), refundKey);
    expect(refund.retention).toBe(72 * HOUR);
    expect(refund.entry.state).toBe('completed');
    expect((await retentionOf(formatScope('Mutation.createOrder', 'alice'), orderKey)).retention).toBe(24 * HOUR);
  });

  it('R1/E6: a header key over refund and another mutation is one unit with the longest retention of its fields', async () => {
    const { post } = app();
    const key = randomUUID();
    await post(
      { query: 'mutation { refund(amount: 5) { id } sendReceipt(orderId: "o") }' },
      { 'idempotency-key': `"${key}"` },
    );

    expect((await retentionOf(formatScope('mutation:refund,sendReceipt', 'alice'), key)).retention).toBe(72 * HOUR);
  });

  it('R4/E3w: describeEndpoints publishes each mutation with its own retention, lease, wait and reuse rule', () => {
    const { idempotency } = app();
    const endpoints = idempotency.describeEndpoints();
    const document = createPolicyDocument({ documentationUrl: 'https://api.example.com/idempotency', endpoints });

    expect(document.endpoints.find((endpoint) => endpoint.operation === 'Mutation.refund')).toMatchObject({
      transport: 'graphql',
      retentionMs: 72 * HOUR,
      retention: '3d',
      lease: '2m',
      waitMs: 5_000,
      wait: '5s',
      expiredReuse: 'reject',
      keySources: [
        'Idempotency-Key header (the whole mutation operation is one record)',
        'argument idempotencyKey',
        'directive @idempotent(key:)',
      ],
    });
    expect(document.endpoints.find((endpoint) => endpoint.operation === 'Mutation.sendReceipt')).toMatchObject({
      retention: '24h',
      lease: '30s',
      waitMs: 0,
      expiredReuse: 'execute',
      keySources: [
        'Idempotency-Key header (the whole mutation operation is one record)',
        'directive @idempotent(key:)',
      ],
    });
  });
});

describe('per-mutation policy, configured wrong', () => {
  it('refuses a coordinate the schema has no mutation field for, when the schema arrives', () => {
    const plugin = useYogaIdempotency({
      store: new MemoryStore(),
      principal: () => 'alice',
      policy: { 'Mutation.refnd': { retention: '1h' } },
    });
    expect(() => createYoga({ schema: createShop().schema, plugins: [plugin] })).toThrow(
      '[idem] useIdempotency: policy names Mutation.refnd, which is not a root mutation field of the schema',
    );
  });

  it('refuses what is not a schema coordinate, and a duration that does not parse, when the plugin is created', () => {
    const store = new MemoryStore();
    const principal = () => 'alice';
    expect(() => useYogaIdempotency({ store, principal, policy: { refund: { retention: '1h' } } })).toThrow(
      /not a schema coordinate such as 'Mutation\.refund'/,
    );
    expect(() =>
      useYogaIdempotency({ store, principal, policy: { 'Mutation.refund': { retention: 'soon' as never } } }),
    ).toThrow(/\[idem\]/);
  });
});
