/**
 * Requests the way the suite sends them, and their answers kept byte for byte: through Fetch
 * (`fetch` over loopback, or an in-process handler such as `yoga.fetch`), or through Node's
 * `http.request`, which can send one header as several header lines.
 */
import { Agent, request as httpRequest, type OutgoingHttpHeaders } from 'node:http';

export const IDEMPOTENCY_KEY = 'Idempotency-Key';

/** A Fetch handler: `fetch` itself, or an in-process server (`yoga.fetch`, tRPC's `fetchRequestHandler`). */
export type FetchHandler = (request: Request) => Promise<Response>;

export const overLoopback: FetchHandler = (request) => fetch(request);

/** What came back, with the raw body bytes (a replay is compared byte for byte, not as parsed JSON). */
export interface Answer {
  status: number;
  headers: Headers;
  bytes: Buffer;
  text: string;
  /** The body as JSON, or undefined when it is not JSON. */
  body: any;
  /** `Idempotent-Replayed: true` (E2). */
  replayed: boolean;
  retryAfter: string | null;
}

export async function toAnswer(response: Response): Promise<Answer> {
  const bytes = Buffer.from(await response.arrayBuffer());
  const text = bytes.toString('utf8');
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  return {
    status: response.status,
    headers: response.headers,
    bytes,
    text,
    body,
    replayed: response.headers.get('idempotent-replayed') === 'true',
    retryAfter: response.headers.get('retry-after'),
  };
}

const ACCEPT = 'application/graphql-response+json, application/json';
/**
 * Every request over loopback on a connection of its own. The example servers close a keep-alive
 * connection after 5 s idle; on a loaded machine the test's event loop can run late and send the
 * next request on a connection the server has just closed ("other side closed", ECONNRESET).
 */
const CONNECTION: [string, string] = ['connection', 'close'];

/** POSTs JSON; `headers` may repeat a name (`[['Idempotency-Key', 'a'], ['Idempotency-Key', 'b']]`: Fetch joins them with ", "). */
export async function postJson(
  handler: FetchHandler,
  url: string,
  json: unknown,
  headers: Array<[string, string]> = [],
): Promise<Answer> {
  const all = new Headers([['content-type', 'application/json'], ['accept', ACCEPT], CONNECTION]);
  for (const [name, value] of headers) all.append(name, value);
  const request = new Request(url, {
    method: 'POST',
    headers: all,
    body: JSON.stringify(json),
    signal: AbortSignal.timeout(20_000),
  });
  return toAnswer(await handler(request));
}

export async function getJson(url: string): Promise<Answer> {
  return toAnswer(await fetch(url, { headers: [CONNECTION], signal: AbortSignal.timeout(20_000) }));
}

const keepAlive = new Agent({ keepAlive: true, maxSockets: 16 });

/**
 * POSTs JSON with `http.request`: an array header value goes out as several header lines
 * (`Idempotency-Key: a` and `Idempotency-Key: b`), and a string is sent as its Latin-1 bytes,
 * so `Buffer.from(value, 'utf8').toString('latin1')` puts raw UTF-8 on the wire.
 */
export function postRaw(url: string, json: unknown, headers: OutgoingHttpHeaders): Promise<Answer> {
  const body = Buffer.from(JSON.stringify(json));
  return new Promise<Answer>((resolve, reject) => {
    const req = httpRequest(
      url,
      {
        method: 'POST',
        agent: keepAlive,
        timeout: 20_000,
        headers: { 'content-type': 'application/json', accept: ACCEPT, 'content-length': body.length, ...headers },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('error', reject);
        res.on('end', () => {
          const responseHeaders = new Headers();
          for (const [name, value] of Object.entries(res.headers)) {
            if (value === undefined) continue;
            for (const one of Array.isArray(value) ? value : [value]) responseHeaders.append(name, one);
          }
          resolve(
            toAnswer(
              new Response(res.statusCode === 204 || res.statusCode === 304 ? null : Buffer.concat(chunks), {
                status: res.statusCode ?? 0,
                headers: responseHeaders,
              }),
            ),
          );
        });
      },
    );
    req.on('timeout', () => req.destroy(new Error('[reliability] request timed out')));
    req.on('error', reject);
    req.end(body);
  });
}

// The suite's waits live with the other test packages' in test/support/waiting.ts.
export { pollUntil, sleep } from '../../support/waiting.ts';
