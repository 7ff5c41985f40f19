/**
 * @idem/fetch — idempotent plain HTTP routes on the Fetch standard: `idempotent(handler, options)`
 * for `(Request) => Response` handlers (Next.js route handlers, Bun, Deno, Cloudflare Workers);
 * the Hono middleware is on its own entry, `@idem/fetch/hono`. The response is the outcome:
 * stored once the handler started (E4), replayed byte for byte (E2).
 */
export { idempotent, requestOperation, type IdempotentHandler, type IdempotentOptions } from './fetch.js';
export { notStarted } from './pipeline.js';
export { keyStatusRoute, type KeyStatusRouteOptions } from './key-status-route.js';
export type { HttpIdempotencyOptions, RequestFingerprintInput } from './options.js';
export { DEFAULT_REPLAY_HEADERS } from './stored-response.js';
// E8: a failure a handler declares final under `onFailure: 'resume'` (stored and replayed, never resumed).
export { finalFailure } from '@idem/core/adapter';
// What route handlers need from the core without a second import (the list is core's, written once).
export * from '@idem/core/essentials';
