/**
 * Pins the one unstable tRPC import (`middlewareMarker` from `unstable-core-do-not-import`):
 * if a tRPC release moves or changes it, this fails before replays do.
 */
import { describe, expect, it } from 'vitest';
import { initTRPC } from '@trpc/server';
import { middlewareMarker } from '@trpc/server/unstable-core-do-not-import';
import { replayedResult } from '../src/middleware-result.ts';

describe('replayedResult (unstable tRPC internals)', () => {
  it('carries the marker tRPC exports today', () => {
    expect(middlewareMarker).toBe('middlewareMarker');
    expect(replayedResult({ id: 1 })).toEqual({ marker: middlewareMarker, ok: true, data: { id: 1 } });
  });

  it('is accepted by tRPC as the result of a middleware that does not call next()', async () => {
    const t = initTRPC.create();
    let resolverRuns = 0;
    const router = t.router({
      answer: t.procedure.use(async () => replayedResult({ replayed: 42 })).mutation(() => ++resolverRuns),
    });
    expect(await t.createCallerFactory(router)({}).answer()).toEqual({ replayed: 42 });
    expect(resolverRuns).toBe(0);
  });
});
