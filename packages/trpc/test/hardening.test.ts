/**
 * Hardening (issue 14): defects an adversarial black-box pass found, pinned through a real tRPC
 * HTTP server. Each test failed before its fix.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initTRPC } from '@trpc/server';
import { z } from 'zod';
import { MemoryStore } from '@idem/core';
import { idempotency, idempotencyErrorFormatter, type IdempotencyContext } from '../src/index.ts';
import { newKey, startStandalone, type RunningServer } from './http.ts';

/** The JSON text of `{"tree": [[[…1…]]]}`, `depth` arrays deep, written without recursion. */
const deepTree = (depth: number) => `{"tree":${'['.repeat(depth)}1${']'.repeat(depth)}}`;

describe('a deeply nested input (issue 14, item 15)', () => {
  let server: RunningServer;
  let runs = 0;

  beforeAll(async () => {
    const t = initTRPC.context<IdempotencyContext & { user: string }>().create({ errorFormatter: idempotencyErrorFormatter, isDev: false });
    const idempotent = idempotency({ store: new MemoryStore(), principal: (ctx: { user: string }) => ctx.user });
    const router = t.router({
      saveTree: t.procedure
        .input(z.object({ tree: z.unknown() }))
        .use(idempotent)
        .mutation(() => ++runs),
    });
    server = await startStandalone(router);
  });
  afterAll(async () => {
    await server?.close();
  });

  it('F1/X2: is refused with 400 BAD_REQUEST idempotency_input_too_deep, not a 500, and the resolver does not run', async () => {
    const response = await fetch(`${server.url}/saveTree`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': newKey() },
      body: deepTree(10_000),
    });
    const body = await response.json();
    expect(response.status).toBe(400);
    expect(body.error.data).toMatchObject({ code: 'BAD_REQUEST', httpStatus: 400, idempotency: { code: 'idempotency_input_too_deep', status: 400 } });
    expect(runs).toBe(0);
  });
});
