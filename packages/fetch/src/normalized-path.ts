/**
 * The path a request's records are scoped by (S1): one route answers `/orders/1` and
 * `/orders/%31` alike (Next.js and most routers decode the path before they match it), so both
 * must name one record, or the same key runs twice. RFC 3986 §6.2.2 normalisation: the
 * percent-encoding of an unreserved character (`A-Z a-z 0-9 - . _ ~`) is decoded, every other
 * percent-encoding is kept, its hex digits upper-cased (`%2f` and `%2F` are one). Dot segments are
 * already gone: the URL parser removed them (`%2E` included).
 */
export function normalizedPath(pathname: string): string {
  return pathname.replace(/%([0-9A-Fa-f]{2})/g, (_, hex: string) => {
    const char = String.fromCharCode(Number.parseInt(hex, 16));
    return /[A-Za-z0-9\-._~]/.test(char) ? char : `%${hex.toUpperCase()}`;
  });
}
