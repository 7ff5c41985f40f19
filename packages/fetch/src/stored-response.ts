/**
 * The response side (E2, E4): a `Response` as idem stores it — status, the allowed headers, the
 * body's bytes — and as it replays it, byte for byte, with `Idempotent-Replayed: true`.
 */
import {
  describesOutcomeNotStored,
  outcomeCodec,
  OutcomeTooLargeError,
  type OutcomeCodec,
  type StoredErrorDescription,
} from '@idem/core/adapter';
import { IDEMPOTENT_REPLAYED_HEADER } from '@idem/core';
import { concat } from './request-body.js';

/** The headers stored with every response: those that describe its body and where it lives. */
export const DEFAULT_REPLAY_HEADERS = [
  'content-type',
  'content-encoding',
  'location',
  'etag',
  'content-location',
  'link',
] as const;

/**
 * Never stored, whatever `replayHeaders` says: another client's session (`Set-Cookie`), what the
 * host computes for each response (`Content-Length`, the replay and resume markers) and hop-by-hop headers
 * (RFC 9110 §7.6.1), which belong to one connection.
 */
const NEVER_STORED = new Set([
  'set-cookie',
  'set-cookie2',
  'content-length',
  'idempotent-replayed',
  'idempotent-resumable',
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

/** The stored body: its text when the bytes are UTF-8 (most are), base64 otherwise, so that any bytes round-trip. */
export type StoredBody = { text: string } | { base64: string };

/** A response as stored (the engine serializes it as JSON, the store keeps that text). */
export interface StoredResponse {
  status: number;
  /** The allowed headers, lowercased names, in the response's order. */
  headers: Array<[string, string]>;
  /** Null for a response without a body (or with a null-body status: 204, 205, 304). */
  body: StoredBody | null;
}

/** A response whose body streamed past `maxStoredBytes`: only its status and size are known. */
interface OversizedResponse {
  status: number;
  tooLarge: number;
}

export type CapturedOutcome = StoredResponse | OversizedResponse;

/**
 * The set of response header names stored: the defaults and `extra`.
 * @throws TypeError `[idem] …` for a header that is never stored.
 */
export function replayHeaderSet(extra: readonly string[], adapter: string): ReadonlySet<string> {
  const names = new Set<string>(DEFAULT_REPLAY_HEADERS);
  for (const raw of extra) {
    const name = raw.trim().toLowerCase();
    if (NEVER_STORED.has(name))
      throw new TypeError(
        `[idem] ${adapter}: \`replayHeaders\` cannot include "${raw}": Set-Cookie, Content-Length, Idempotent-Replayed, Idempotent-Resumable and hop-by-hop headers are never stored, so a replay never hands one client's session or connection to another`,
      );
    names.add(name);
  }
  return names;
}

const NULL_BODY_STATUSES = new Set([101, 103, 204, 205, 304]);
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
const encoder = new TextEncoder();

/**
 * Reads `response` for storing: its body up to `maxStoredBytes`. `stored` is what the engine
 * keeps; `live` is the response for the client that ran the handler, every header and byte of it:
 * the same bytes, or, past the limit, the bytes read so far followed by the rest of the stream.
 */
export async function captureResponse(
  response: Response,
  replayHeaders: ReadonlySet<string>,
  maxStoredBytes: number,
): Promise<CapturedResponse> {
  const { status } = response;
  const headers = storedHeaders(response.headers, replayHeaders);
  if (response.body === null || NULL_BODY_STATUSES.has(status)) {
    return { stored: { status, headers, body: null }, live: response };
  }
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    total += value.byteLength;
    if (total > maxStoredBytes) {
      return { stored: { status, tooLarge: total }, live: new Response(resume(chunks, reader), response) };
    }
  }
  const bytes = concat(chunks, total);
  return { stored: { status, headers, body: encodeBody(bytes) }, live: new Response(bytes, response) };
}

/** The bytes already read, then the rest of `reader`. */
function resume(chunks: Uint8Array[], reader: ReadableStreamDefaultReader<Uint8Array>): ReadableStream<Uint8Array> {
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      const next = chunks.shift();
      if (next !== undefined) return controller.enqueue(next);
      const { done, value } = await reader.read();
      if (done) controller.close();
      else controller.enqueue(value);
    },
    cancel: (reason) => reader.cancel(reason),
  });
}

function storedHeaders(headers: Headers, allowed: ReadonlySet<string>): Array<[string, string]> {
  // A header the response itself names in `Connection` is hop-by-hop too (RFC 9110 §7.6.1).
  const connection = new Set(
    (headers.get('connection') ?? '')
      .split(',')
      .map((name) => name.trim().toLowerCase())
      .filter(Boolean),
  );
  const kept: Array<[string, string]> = [];
  headers.forEach((value, name) => {
    if (allowed.has(name) && !NEVER_STORED.has(name) && !connection.has(name)) kept.push([name, value]);
  });
  return kept;
}

export function encodeBody(bytes: Uint8Array): StoredBody {
  try {
    return { text: utf8.decode(bytes) };
  } catch {
    return { base64: Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64') };
  }
}

export function decodeBody(body: StoredBody): Uint8Array<ArrayBuffer> {
  if ('text' in body) return encoder.encode(body.text);
  const buffer = Buffer.from(body.base64, 'base64');
  const bytes = new Uint8Array(buffer.byteLength);
  bytes.set(buffer);
  return bytes;
}

/** A response read for storing (see {@link captureResponse}): what is stored, and what the client that ran the handler gets. */
export interface CapturedResponse {
  stored: CapturedOutcome;
  live: Response;
}

const capturedCodec = outcomeCodec<CapturedResponse, Response>({
  // A response over `maxStoredBytes` is refused as too large, so that the engine stores the
  // documented 500 that says the request was executed.
  stringify({ stored }) {
    if ('tooLarge' in stored) throw new OutcomeTooLargeError(stored.tooLarge, stored.status);
    return JSON.stringify(stored);
  },
  parse: (text) => replayResponse(JSON.parse(text)),
  // A1: the record, its events and its timeline show the response's own status.
  statusOf: ({ stored }) => stored.status,
});

/**
 * How a response is stored and replayed: JSON of the {@link StoredResponse}; replayed, the
 * response itself, or, for an outcome the engine could not store (E4), the 500 that says the
 * request was executed. Any other stored error is what the handler threw: rethrown for the host.
 */
export const responseCodec: OutcomeCodec<CapturedResponse, Response> = {
  encode: (outcome) => capturedCodec.encode(outcome),
  decode(stored) {
    if (stored.kind === 'error') {
      const description: StoredErrorDescription = JSON.parse(stored.body);
      if (describesOutcomeNotStored(description)) return { ok: true, value: notStoredReplay(description.message) };
    }
    return capturedCodec.decode(stored);
  },
};

/** E4: the replay of an outcome too large to store: a 500 that says the request was executed. */
function notStoredReplay(detail: string): Response {
  const problem: AboutBlankProblem = { type: 'about:blank', title: 'Internal Server Error', status: 500, detail };
  return problemResponse(problem, { [IDEMPOTENT_REPLAYED_HEADER]: 'true' });
}

/** RFC 9457 §4.2.1: a problem that the status code says all about. */
export interface AboutBlankProblem {
  type: 'about:blank';
  title: string;
  status: number;
  detail: string;
}

/** A problem+json response. */
export function problemResponse(problem: { status: number }, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(problem), {
    status: problem.status,
    headers: { 'content-type': 'application/problem+json', ...headers },
  });
}

/** E2: the stored response, byte for byte, marked as a replay. */
export function replayResponse(stored: StoredResponse): Response {
  const headers = new Headers(stored.headers);
  headers.set(IDEMPOTENT_REPLAYED_HEADER, 'true');
  return new Response(stored.body === null ? null : decodeBody(stored.body), { status: stored.status, headers });
}
