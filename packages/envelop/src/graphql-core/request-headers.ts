import { IDEMPOTENCY_KEY_HEADER } from '@idem/core';
import type { RequestHeaders } from './options.js';

const HEADER_NAME = IDEMPOTENCY_KEY_HEADER.toLowerCase();

interface HttpContext {
  request?: { headers?: RequestHeaders };
  req?: { headers?: RequestHeaders };
}

/** The HTTP request a GraphQL context was built for: Yoga's Fetch `context.request`, or Node's `context.req`. */
export function requestOf(context: unknown): object | undefined {
  if (context === null || typeof context !== 'object') return undefined;
  const { request, req } = context as HttpContext;
  if (request !== null && typeof request === 'object') return request;
  if (req !== null && typeof req === 'object') return req;
  return undefined;
}

/** The default `getHeaders`: `context.request.headers`, then `context.req.headers`. */
export function headersOf(context: unknown): RequestHeaders | undefined {
  return (requestOf(context) as HttpContext['request'])?.headers;
}

/** Every `Idempotency-Key` field value, for `parseIdempotencyKey` (which refuses several). */
export function idempotencyKeyHeader(
  headers: RequestHeaders | null | undefined,
): string | readonly string[] | undefined {
  if (!headers) return undefined;
  if (typeof headers.get === 'function')
    return (headers as { get(name: string): string | null }).get(HEADER_NAME) ?? undefined;
  const values: string[] = [];
  for (const [name, value] of Object.entries(headers as Record<string, string | readonly string[] | undefined>)) {
    if (name.toLowerCase() !== HEADER_NAME || value === undefined) continue;
    if (typeof value === 'string') values.push(value);
    else values.push(...value);
  }
  return values.length === 0 ? undefined : values.length === 1 ? values[0] : values;
}
