/**
 * Hardening (issue 14): defects an adversarial black-box pass found, pinned through GraphQL Yoga
 * (`yoga.fetch`). Each test failed before its fix.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { createSchema, createYoga } from 'graphql-yoga';
import { MemoryStore } from '@idem/core';
import { useYogaIdempotency } from '../src/index.ts';

/** The JSON text of arrays nested 10,000 deep, written by hand: JSON.stringify is recursive too. */
const DEEP_TREE = `${'['.repeat(10_000)}1${']'.repeat(10_000)}`;

describe('a deeply nested input (issue 14, item 15)', () => {
  let runs = 0;
  const yoga = createYoga({
    logging: false,
    schema: createSchema({
      typeDefs: /* GraphQL */ `
        scalar JSON
        type Query { runs: Int! }
        type Mutation { saveTree(tree: JSON, idempotencyKey: String): Int! }
      `,
      resolvers: { Query: { runs: () => runs }, Mutation: { saveTree: () => ++runs } },
    }),
    plugins: [useYogaIdempotency({ store: new MemoryStore(), principal: () => 'alice' })],
  });
  const post = async (query: string, variables: string, headers: Record<string, string> = {}) => {
    const response = await yoga.fetch('http://yoga/graphql', {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/graphql-response+json', ...headers },
      body: `{"query":${JSON.stringify(query)},"variables":{${variables}}}`,
    });
    return { status: response.status, body: await response.json() };
  };

  it('F1/X3: with a header key (operation unit) it is refused with 400 IDEMPOTENCY_INPUT_TOO_DEEP, not a 500, and the resolver does not run', async () => {
    const reply = await post('mutation Save($tree: JSON) { saveTree(tree: $tree) }', `"tree":${DEEP_TREE}`, {
      'idempotency-key': randomUUID(),
    });
    expect(reply.status).toBe(400);
    expect(reply.body.errors[0].extensions).toMatchObject({
      code: 'IDEMPOTENCY_INPUT_TOO_DEEP',
      idempotency: { code: 'idempotency_input_too_deep', status: 400 },
    });
    expect(runs).toBe(0);
  });

  it('F1/X3: with an argument key (field unit) it is refused with 400 IDEMPOTENCY_INPUT_TOO_DEEP, and the resolver does not run', async () => {
    const reply = await post(
      'mutation Save($tree: JSON, $key: String) { saveTree(tree: $tree, idempotencyKey: $key) }',
      `"tree":${DEEP_TREE},"key":"${randomUUID()}"`,
    );
    expect(reply.status).toBe(400);
    expect(reply.body.errors[0].extensions).toMatchObject({ code: 'IDEMPOTENCY_INPUT_TOO_DEEP' });
    expect(runs).toBe(0);
  });
});
