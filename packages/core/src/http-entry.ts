/**
 * `@idem/core/http` — HTTP helpers beside the engine, for an application that serves browsers
 * or publishes its policy: CORS for clients on another origin (the headers idem reads and sets),
 * the policy page and its handler (R4), the documentation URL of problem types, and the HTML
 * escaping the policy and timeline pages use.
 */

// CORS for browser clients on another origin: the headers idem reads and sets.
export {
  idempotencyCors,
  idempotencyCorsHeaders,
  IDEMPOTENCY_CORS_ALLOWED_HEADERS,
  IDEMPOTENCY_CORS_EXPOSED_HEADERS,
  type CorsPackageOptions,
  type CorsRequestLike,
  type IdempotencyCorsConfiguration,
  type IdempotencyCorsOptions,
  type YogaCorsDecision,
} from './cors.js';

// The published policy as a page (R4); the document itself is `createPolicyDocument` in `@idem/core`.
export { renderPolicyHtml } from './policy.js';
export { createPolicyHandler, prefersJson, type PolicyHandlerOptions } from './policy-handler.js';

// Where a problem's `type` points, relative to the request that got it.
export { resolveDocumentationUrl, requestUrlOf } from './documentation-url.js';
export { escapeHtml } from './html.js';
