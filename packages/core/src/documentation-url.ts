/**
 * Where problem bodies point (K2, R4, X1): the documentation URL made absolute for the request
 * being answered, so that a client can follow a problem's `type` wherever it runs.
 */

/**
 * The documentation URL as a problem body links to it. An absolute `documentationUrl` (a
 * configured base, such as the public URL behind a gateway) is used as it is; a relative one is
 * resolved against `requestUrl`, the URL of the request being answered. Without a request URL a
 * relative one stays relative.
 */
export function resolveDocumentationUrl(documentationUrl: string, requestUrl: string | undefined): string {
  if (requestUrl === undefined || URL.canParse(documentationUrl)) return documentationUrl;
  try {
    return new URL(documentationUrl, requestUrl).href;
  } catch {
    return documentationUrl;
  }
}

interface RequestLike {
  url?: unknown;
  headers?: unknown;
  socket?: { encrypted?: unknown } | null;
}

/**
 * The absolute URL of an HTTP request: a Fetch `Request`'s `url`; for a Node.js
 * `IncomingMessage`, its `Host` header, the connection's scheme and `req.url`. Undefined when it
 * cannot be told. `Forwarded` and `X-Forwarded-*` are not read (any client can send them): behind
 * a proxy that changes the host or the path, configure an absolute `documentationUrl`.
 */
export function requestUrlOf(request: unknown): string | undefined {
  if (request === null || typeof request !== 'object') return undefined;
  const { url, headers, socket } = request as RequestLike;
  if (typeof url === 'string' && URL.canParse(url)) return url;
  const host = hostOf(headers);
  if (host === undefined) return undefined;
  const scheme = socket?.encrypted ? 'https' : 'http';
  try {
    return new URL(typeof url === 'string' ? url : '/', `${scheme}://${host}`).href;
  } catch {
    return undefined;
  }
}

function hostOf(headers: unknown): string | undefined {
  if (headers === null || typeof headers !== 'object') return undefined;
  const host =
    typeof (headers as { get?: unknown }).get === 'function'
      ? (headers as Headers).get('host')
      : (headers as Record<string, unknown>)['host'];
  return typeof host === 'string' && host !== '' ? host : undefined;
}
