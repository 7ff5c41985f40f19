/**
 * The request side: the body read within its limit (413 past it, before anything is claimed), and
 * what the fingerprint reads of a request (F1).
 */
import { normalizedPath } from './normalized-path.js';
import type { RequestFingerprintInput } from './options.js';

/** The request body is larger than `maxBodyBytes`: 413, nothing claimed or run. */
export class RequestBodyTooLargeError extends Error {
  constructor(readonly maxBodyBytes: number) {
    super(`The request body is larger than the ${maxBodyBytes} bytes this endpoint reads; nothing was executed.`);
    this.name = 'RequestBodyTooLargeError';
  }
}

/**
 * The bytes of `stream`, or `undefined` once more than `limit` have arrived (the rest is not
 * read: the stream is cancelled).
 */
export async function readAtMost(
  stream: ReadableStream<Uint8Array> | null,
  limit: number,
): Promise<Uint8Array<ArrayBuffer> | undefined> {
  if (stream === null) return new Uint8Array(0);
  const reader = stream.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return concat(chunks, total);
    total += value.byteLength;
    if (total > limit) {
      // Not awaited: a branch of a teed body (a clone's) settles its cancel only once the other branch is cancelled too.
      reader.cancel().catch(() => {});
      return undefined;
    }
    chunks.push(value);
  }
}

export function concat(chunks: readonly Uint8Array[], total: number): Uint8Array<ArrayBuffer> {
  const bytes = new Uint8Array(total);
  let offset = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return bytes;
}

/**
 * Refuses a body whose `Content-Length` already says it is over the limit, without reading it.
 * @throws RequestBodyTooLargeError
 */
export function checkContentLength(headers: Headers, maxBodyBytes: number): void {
  const declared = headers.get('content-length');
  if (declared !== null && /^\d+$/.test(declared.trim()) && Number(declared) > maxBodyBytes)
    throw new RequestBodyTooLargeError(maxBodyBytes);
}

/**
 * The body of `request` as received, read from a clone so that the handler still reads the
 * original, within `maxBodyBytes`.
 * @throws RequestBodyTooLargeError
 */
export async function readRequestBody(request: Request, maxBodyBytes: number): Promise<Uint8Array> {
  checkContentLength(request.headers, maxBodyBytes);
  if (request.bodyUsed) throw new TypeError('[idem] the request body was read before idempotency could fingerprint it');
  const bytes = await readAtMost(request.body === null ? null : request.clone().body, maxBodyBytes);
  if (bytes === undefined) throw new RequestBodyTooLargeError(maxBodyBytes);
  return bytes;
}

const JSON_MEDIA_TYPE = /^application\/(?:[\w.!#$&^-]+\+)?json$/;
const utf8 = new TextDecoder('utf-8', { fatal: true });

/** The media type of a `Content-Type` value: lowercased, parameters dropped; null when absent or empty. */
export function mediaTypeOf(contentType: string | null): string | null {
  if (contentType === null) return null;
  const essence = contentType.split(';', 1)[0]!.trim().toLowerCase();
  return essence === '' ? null : essence;
}

/** The body as the fingerprint and the key field read it: parsed when it is JSON, its bytes otherwise. */
export type ReadBody = { contentType: string | null } & ({ json: unknown } | { bytes: Uint8Array });

/**
 * A body of a JSON media type that parses is its value (as `request.json()` reads it); anything
 * else, malformed JSON included, is its bytes.
 */
export function readBody(contentType: string | null, bytes: Uint8Array): ReadBody {
  const mediaType = mediaTypeOf(contentType);
  if (mediaType !== null && JSON_MEDIA_TYPE.test(mediaType)) {
    try {
      return { contentType: mediaType, json: JSON.parse(utf8.decode(bytes)) };
    } catch {
      // Not JSON after all: the handler will say what it makes of it; the bytes are the request.
    }
  }
  return { contentType: mediaType, bytes };
}

export interface FingerprintSettings {
  fingerprintHeaders: readonly string[];
  fingerprintQuery: boolean;
  /** The key field, left out of a JSON object body (F1). */
  keyField: string | false;
}

/** F1: what the fingerprint reads of a request (see {@link RequestFingerprintInput}). */
export function fingerprintInput(
  request: Request,
  body: ReadBody,
  { fingerprintHeaders, fingerprintQuery, keyField }: FingerprintSettings,
): RequestFingerprintInput {
  const url = new URL(request.url);
  const input: RequestFingerprintInput = {
    method: request.method.toUpperCase(),
    path: normalizedPath(url.pathname),
    contentType: body.contentType,
  };
  if (fingerprintQuery) input.query = url.search;
  if (fingerprintHeaders.length > 0) {
    input.headers = {};
    for (const name of fingerprintHeaders) input.headers[name] = request.headers.get(name);
  }
  if ('json' in body) input.json = keyField === false ? body.json : omitField(body.json, keyField);
  else input.bytes = body.bytes;
  return input;
}

export function isPlainObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

function omitField(json: unknown, field: string): unknown {
  if (!isPlainObject(json) || !Object.hasOwn(json, field)) return json;
  const { [field]: _key, ...rest } = json;
  return rest;
}
