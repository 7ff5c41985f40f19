/**
 * CORS as Chromium enforces it (headless, Debian's `chromium` through playwright-core): a page
 * on an allowed origin embeds a `sandbox="allow-scripts"` iframe, whose origin is `null`, as a
 * hostile page (or ad) on any site can. The API allows two origins (the example's default once
 * `CHECKOUT_PORT` is set), and a bare Yoga built on the library allows two with credentials.
 * Yoga answered an origin missing from such a list with `Access-Control-Allow-Origin: null`,
 * which the sandboxed frame matches: it could send a preflighted, credentialed mutation (charged)
 * and read the answers. Now neither: the preflight fails and nothing is charged, reads are
 * blocked — while the allowed page itself still pays.
 *
 * Skipped when chromium is not installed, unless IDEM_REQUIRE_BROWSER=1 (CI), which fails instead.
 */
import { execFileSync } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { chromium, type Browser, type Page } from 'playwright-core';
import { createSchema, createYoga } from 'graphql-yoga';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { idempotencyCors } from '@idem/core/http';
import { openSqliteTarget, type SqliteTarget } from '../../../packages/drizzle/test/sqlite-target.ts';
import { ledger, migrateExample, startExample, type RunningExample } from './http.ts';

function chromiumPath(): string | undefined {
  try {
    return execFileSync('sh', ['-c', 'command -v chromium'], { encoding: 'utf8' }).trim() || undefined;
  } catch {
    return undefined;
  }
}
const executablePath = chromiumPath();
const required = process.env.IDEM_REQUIRE_BROWSER === '1';
if (!executablePath && !required)
  console.warn('[browser test] skipped: chromium is not installed; IDEM_REQUIRE_BROWSER=1 makes this a failure');

/** What a script in the page (or its frame) got: the status and body it could read, or the error fetch threw. */
interface Attempt {
  status?: number;
  body?: string;
  error?: string;
}

/** The script both the page and its sandboxed frame run: a preflighted mutation, a plain read, a credentialed read of the bare Yoga. */
const ATTEMPTS = `
async function attempt(url, init) {
  try {
    const response = await fetch(url, init);
    return { status: response.status, body: await response.text() };
  } catch (error) {
    return { error: String(error) };
  }
}
async function run(api, bare, key) {
  return {
    mutation: await attempt(api + '/graphql', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key, authorization: 'Bearer mallory' },
      body: JSON.stringify({ query: 'mutation { createPayment(input: {amount: 666, currency: "EUR"}) { id } }' }),
    }),
    read: await attempt(api + '/graphql?query=' + encodeURIComponent('{ ledger { id amount } }')),
    bareCredentialed: await attempt(bare + '/graphql?query=' + encodeURIComponent('{ secret }'), { credentials: 'include' }),
  };
}`;

describe.skipIf(!executablePath && !required)('CORS in headless Chromium: a sandboxed iframe (Origin: null)', () => {
  let target: SqliteTarget;
  let api: RunningExample;
  let bare: Server;
  let bareUrl: string;
  let pages: Server;
  let pageUrl: string;
  let browser: Browser;
  let page: Page;

  beforeAll(async () => {
    if (!executablePath) throw new Error('[browser test] IDEM_REQUIRE_BROWSER=1 but chromium is not installed');
    pages = createServer((req, res) => {
      const params = new URL(req.url ?? '/', 'http://page').searchParams;
      const frame = `<script>${ATTEMPTS}
run(${JSON.stringify(params.get('api'))}, ${JSON.stringify(params.get('bare'))}, 'frame-' + Math.random())
  .then((result) => parent.postMessage({ from: 'frame', result }, '*'));</script>`;
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
      res.end(`<!doctype html><title>shop</title><script>${ATTEMPTS}
const results = {};
addEventListener('message', (event) => { results.frame = event.data.result; document.body.dataset.frame = 'done'; });
run(${JSON.stringify(params.get('api'))}, ${JSON.stringify(params.get('bare'))}, 'page-' + Math.random())
  .then((result) => { results.page = result; document.body.dataset.page = 'done'; });
window.results = results;
</script><body><iframe sandbox="allow-scripts" srcdoc="${frame.replaceAll('&', '&amp;').replaceAll('"', '&quot;')}"></iframe></body>`);
    });
    await new Promise<void>((resolve) => pages.listen(0, '127.0.0.1', resolve));
    pageUrl = `http://127.0.0.1:${(pages.address() as AddressInfo).port}`;

    target = await openSqliteTarget();
    await migrateExample(target.db);
    // Two allowed origins, as main.ts allows for the checkout page (localhost and 127.0.0.1).
    api = await startExample(target.db, { CORS_ORIGIN: `${pageUrl},http://localhost:1` });

    const yoga = createYoga({
      cors: idempotencyCors({ origin: [pageUrl, 'http://localhost:1'], credentials: true }),
      logging: false,
      schema: createSchema({
        typeDefs: 'type Query { secret: String! }',
        resolvers: { Query: { secret: () => 's3cret' } },
      }),
    });
    bare = createServer(yoga);
    await new Promise<void>((resolve) => bare.listen(0, '127.0.0.1', resolve));
    bareUrl = `http://127.0.0.1:${(bare.address() as AddressInfo).port}`;

    browser = await chromium.launch({
      executablePath: executablePath!,
      args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking'],
    });
    page = await (await browser.newContext()).newPage();
  });
  afterAll(async () => {
    await browser?.close();
    await api?.close();
    await target?.close();
    for (const server of [bare, pages]) if (server) await new Promise((resolve) => server.close(resolve));
  });

  it('CORS: the sandboxed frame can neither send a preflighted mutation (nothing charged) nor read an answer, credentialed or not; the allowed page can', async () => {
    await page.goto(`${pageUrl}/?api=${encodeURIComponent(api.url)}&bare=${encodeURIComponent(bareUrl)}`);
    await page.locator('body[data-page="done"][data-frame="done"]').waitFor({ timeout: 20_000 });
    const results = (await page.evaluate(() => (window as unknown as { results: unknown }).results)) as Record<
      'page' | 'frame',
      Record<'mutation' | 'read' | 'bareCredentialed', Attempt>
    >;
    console.info(`[browser test] ${JSON.stringify(results)}`);

    // The allowed origin: the mutation is charged and every answer is readable.
    expect(results.page.mutation.status).toBe(200);
    expect(JSON.parse(results.page.mutation.body!).data.createPayment.id).toMatch(/^pay_/);
    expect(results.page.read.status).toBe(200);
    expect(results.page.bareCredentialed.body).toContain('s3cret');

    // The sandboxed frame (Origin: null): fetch fails for all three; its mutation never left the preflight.
    expect(results.frame.mutation).toEqual({ error: expect.stringContaining('TypeError') });
    expect(results.frame.read).toEqual({ error: expect.stringContaining('TypeError') });
    expect(results.frame.bareCredentialed).toEqual({ error: expect.stringContaining('TypeError') });
    const charged = await ledger(api.url);
    expect(charged.filter((entry) => entry.amount === 666)).toHaveLength(1);
  });
});
