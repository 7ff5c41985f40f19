/**
 * `csrfPrevention` (on by default) runs Yoga's own CSRF plugin, an optional peer of
 * @idem/envelop. Without it installed, the server says so in its log when the plugin is set
 * up, and refuses every request rather than running mutations unprotected; `csrfPrevention:
 * false` needs no plugin.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createYoga } from 'graphql-yoga';
import { MemoryStore } from '@idem/core';
import { useYogaIdempotency } from '../src/index.ts';
import { createShop } from './fixtures/shop.ts';

vi.mock('@graphql-yoga/plugin-csrf-prevention', () => {
  throw new Error("Cannot find package '@graphql-yoga/plugin-csrf-prevention'");
});

const mutation = (key: string) =>
  JSON.stringify({
    query: `mutation { placeOrder(input: { amount: 5, currency: "EUR" }, idempotencyKey: "${key}") { id } }`,
  });

const setUp = (csrfPrevention?: false) => {
  const shop = createShop();
  const yoga = createYoga({
    schema: shop.schema,
    logging: false,
    maskedErrors: false,
    plugins: [useYogaIdempotency({ store: new MemoryStore(), principal: () => 'alice', csrfPrevention })],
  });
  const post = () =>
    yoga.fetch('http://yoga/graphql', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: mutation(randomUUID()),
    });
  return { shop, post };
};

describe("csrfPrevention without Yoga's CSRF plugin installed", () => {
  afterEach(() => vi.restoreAllMocks());

  it('logs an [idem] error naming the package when the plugin is set up, and runs no mutation', async () => {
    const logged = vi.spyOn(console, 'error').mockImplementation(() => {});
    const { shop, post } = setUp();
    await vi.waitFor(() => expect(logged).toHaveBeenCalled());
    expect(String(logged.mock.calls[0]?.[0])).toMatch(
      /^\[idem\] useYogaIdempotency: .*npm install @graphql-yoga\/plugin-csrf-prevention/,
    );
    const response = await post();
    expect(response.status).toBeGreaterThanOrEqual(500);
    expect(shop.calls['placeOrder']).toBeUndefined();
  });

  it('csrfPrevention: false needs no plugin: the mutation runs and nothing is logged', async () => {
    const logged = vi.spyOn(console, 'error').mockImplementation(() => {});
    const { shop, post } = setUp(false);
    const response = await post();
    expect(response.status).toBe(200);
    expect(shop.calls['placeOrder']).toBe(1);
    expect(logged).not.toHaveBeenCalled();
  });
});
