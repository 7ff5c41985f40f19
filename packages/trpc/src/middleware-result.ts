/**
 * The one place that imports tRPC's unstable internals (pinned by test/middleware-result.test.ts).
 * A middleware that answers without calling `next()` — a replay — must return a result carrying
 * tRPC's `middlewareMarker`; tRPC exports it only from `unstable-core-do-not-import`, with
 * `MiddlewareResult`, the type through which a middleware's context override reaches the resolver.
 */
import { middlewareMarker, type MiddlewareResult } from '@trpc/server/unstable-core-do-not-import';

export type { MiddlewareResult };

/** A successful middleware result whose data is `data` (E2: a replayed output). */
export function replayedResult<TContextOverride>(data: unknown): MiddlewareResult<TContextOverride> {
  return { marker: middlewareMarker, ok: true, data };
}
