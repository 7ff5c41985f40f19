/**
 * The admin pages: `GET /admin/timeline?scope=…&key=…` draws one key's generations (A1). Off
 * unless `ADMIN_TOKEN` is set (the path is then a 404 like any other); with it, a request must
 * carry the token as `Authorization: Bearer <token>` or as the password of HTTP Basic (which a
 * browser asks for), else 401.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { validateKey, type IdempotencyStore } from '@idem/core';
import { renderLookupPage, renderTimelinePage } from './timeline-page.ts';

export const ADMIN_TIMELINE_PATH = '/admin/timeline';

/** Whether `authorization` carries `token`: Bearer, or Basic with the token as password (any user name). */
export function carriesAdminToken(authorization: string | undefined, token: string): boolean {
  if (!authorization) return false;
  const bearer = /^Bearer\s+(\S+)\s*$/i.exec(authorization)?.[1];
  let presented = bearer;
  if (presented === undefined) {
    const basic = /^Basic\s+([A-Za-z0-9+/=]+)\s*$/i.exec(authorization)?.[1];
    if (basic === undefined) return false;
    const decoded = Buffer.from(basic, 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    if (colon < 0) return false;
    presented = decoded.slice(colon + 1);
  }
  // Compared as digests, in constant time: neither the length nor a prefix leaks.
  const digest = (value: string) => createHash('sha256').update(value).digest();
  return timingSafeEqual(digest(presented), digest(token));
}

/** Serves the timeline page; `now` is the server's clock, by which retention ends are judged. */
export async function serveTimeline(
  req: IncomingMessage,
  res: ServerResponse,
  { store, token, url }: { store: IdempotencyStore; token: string; url: URL },
): Promise<void> {
  if (!carriesAdminToken(req.headers.authorization, token)) {
    res.setHeader('WWW-Authenticate', 'Basic realm="payments admin", charset="UTF-8"');
    return html(
      res,
      401,
      renderLookupPage({
        message:
          'This page needs the admin token: Authorization: Bearer <ADMIN_TOKEN>, or the token as the password of HTTP Basic.',
      }),
    );
  }
  const scope = url.searchParams.get('scope')?.trim() || undefined;
  const rawKey = url.searchParams.get('key')?.trim() || undefined;
  if (!scope || !rawKey)
    return html(
      res,
      400,
      renderLookupPage({
        scope,
        key: rawKey,
        message: 'Name the scope (account/operation, e.g. alice/payments.create) and the key.',
      }),
    );
  let key: string;
  try {
    key = validateKey(rawKey);
  } catch (error) {
    return html(
      res,
      400,
      renderLookupPage({ scope, key: rawKey, message: error instanceof Error ? error.message : String(error) }),
    );
  }
  const generations = await store.timeline(scope, key);
  if (generations.length === 0)
    return html(
      res,
      404,
      renderLookupPage({
        scope,
        key,
        message: `No record of key ${JSON.stringify(key)} in scope ${JSON.stringify(scope)}.`,
      }),
    );
  html(res, 200, renderTimelinePage({ scope, key, generations, now: new Date() }));
}

function html(res: ServerResponse, status: number, body: string): void {
  res.writeHead(status, {
    'content-type': 'text/html; charset=utf-8',
    'content-length': Buffer.byteLength(body),
    'cache-control': 'no-store',
  });
  res.end(body);
}
