/**
 * A real browser: headless Chromium (Debian's `chromium`, driven by playwright-core) opens the
 * checkout page, served from another origin than the API, and pays while a TCP proxy in front of
 * the API drops the first answer. Then, past the published retention, the page's retry sends no
 * payment: the client looks the key up and the page shows "Already paid at HH:MM (200)"; the same
 * key sent anyway (the incident) charges again, and the admin timeline draws both generations.
 * Screenshots go to test-artifacts/browser/ (gitignored).
 *
 * Skipped when chromium is not installed, unless IDEM_REQUIRE_BROWSER=1 (CI), which fails instead.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase, type OpenedDatabase } from '@idem/drizzle/connect';
import { startTcpProxy, type TcpProxy } from '../../../test/reliability/support/tcp-proxy.ts';
import { createCheckoutServer } from '../src/checkout/server.ts';
import { ledger, migrateExample, mutate, sleep, startExample, type RunningExample } from './http.ts';

const ARTIFACTS = fileURLToPath(new URL('../../../test-artifacts/browser/', import.meta.url));
const ADMIN_TOKEN = 'browser-test-admin-token';
const RETENTION_MS = 3000;

function chromiumPath(): string | undefined {
  try {
    return execFileSync('sh', ['-c', 'command -v chromium'], { encoding: 'utf8' }).trim() || undefined;
  } catch {
    return undefined;
  }
}
const executablePath = chromiumPath();
const required = process.env.IDEM_REQUIRE_BROWSER === '1';
if (!executablePath && !required) {
  console.warn(
    '[browser test] skipped: chromium is not installed (apt-get install -y chromium); IDEM_REQUIRE_BROWSER=1 makes this a failure',
  );
}

describe.skipIf(!executablePath && !required)(
  'the checkout page in headless Chromium, on another origin than the API',
  () => {
    let directory: string;
    let opened: OpenedDatabase;
    let api: RunningExample;
    let proxy: TcpProxy;
    let checkout: Server;
    let checkoutUrl: string;
    let browser: Browser;
    let page: Page;
    /** The key the page paid with, and when. */
    let paid: { key: string; at: number };

    beforeAll(async () => {
      if (!executablePath)
        throw new Error(
          '[browser test] IDEM_REQUIRE_BROWSER=1 but `command -v chromium` finds nothing: apt-get update && apt-get install -y chromium',
        );
      mkdirSync(ARTIFACTS, { recursive: true });
      directory = mkdtempSync(join(tmpdir(), 'idem-example-browser-'));
      opened = await openDatabase(`file:${join(directory, 'payments.db')}`);
      await migrateExample(opened.db);

      // The page's origin (127.0.0.1:<checkout>) is not the API's (127.0.0.1:<proxy>): CORS.
      let apiUrl = '';
      checkout = await createCheckoutServer({ apiUrl: () => apiUrl });
      await new Promise<void>((resolve) => checkout.listen(0, '127.0.0.1', resolve));
      checkoutUrl = `http://127.0.0.1:${(checkout.address() as AddressInfo).port}`;
      api = await startExample(opened.db, {
        IDEM_TTL: `${RETENTION_MS / 1000}s`,
        IDEM_LEASE: '1s',
        CORS_ORIGIN: checkoutUrl,
        ADMIN_TOKEN,
      });
      const target = new URL(api.url);
      proxy = await startTcpProxy({ host: target.hostname, port: Number(target.port) });
      apiUrl = `http://127.0.0.1:${proxy.port}`;

      browser = await chromium.launch({
        executablePath: executablePath!,
        args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking'],
      });
      page = await (await browser.newContext({ viewport: { width: 900, height: 760 } })).newPage();
    });

    afterAll(async () => {
      await browser?.close();
      await proxy?.close();
      await api?.close();
      if (checkout) await new Promise((resolve) => checkout.close(resolve));
      await opened?.close();
      if (directory) rmSync(directory, { recursive: true, force: true });
    });

    const result = () => page.locator('#result');
    const logLines = async (kind: string) => page.locator(`#log li[data-kind="${kind}"]`).allTextContents();

    it('E2: Pay while the proxy drops the first answers: Chromium resends, the client retries with the same key, the page sees the replay (CORS-exposed Idempotent-Replayed), one ledger row', async () => {
      await page.goto(checkoutUrl);
      await page.locator('body[data-ready="true"]').waitFor();
      // The first answer is dropped on a kept-alive connection, which Chromium answers by resending
      // the request itself (same bytes, so the same key) on a new one; that answer is dropped too,
      // so the page's fetch fails and idempotencyLink retries.
      proxy.dropResponseAfterClientSends('POST /trpc/payments.create', { times: 2 });

      await page.locator('#pay').click();
      await page.locator('#result[data-state="paid"]').waitFor({ timeout: 20_000 });

      const key = (await result().getAttribute('data-key'))!;
      paid = { key, at: Date.now() };
      expect(await result().getAttribute('data-replayed')).toBe('true');
      await expect(result().textContent()).resolves.toContain('Idempotent-Replayed: true');
      expect(proxy.stats.responsesDropped).toBe(2);
      // The page's own log: a lost answer, the link's retry with the same key, the replay.
      const attempts = await logLines('attempt');
      expect((await logLines('lost')).length).toBeGreaterThanOrEqual(1);
      expect(await logLines('retry')).toContainEqual(expect.stringContaining('with the same key (network)'));
      for (const attempt of attempts) expect(attempt).toContain(`Idempotency-Key ${key}`);
      expect(await logLines('replayed')).toEqual([expect.stringContaining('200, Idempotent-Replayed: true')]);
      // On the server: one execution, then replays only; one charge.
      const forKey = api.events.filter((event) => 'key' in event && event.key === key).map((event) => event.type);
      expect(forKey.filter((type) => type === 'claimed')).toHaveLength(1);
      const served = forKey.filter((type) => type === 'claimed' || type === 'replayed').length;
      expect(served).toBe(3);
      expect(await ledger(api.url)).toHaveLength(1);
      // Which layer retried: every request the server saw that the page's fetch did not send was Chromium's own resend.
      const paths = {
        requestsServed: served,
        pageFetches: attempts.length,
        chromiumResends: served - attempts.length,
        linkRetries: (await logLines('retry')).length,
      };
      writeFileSync(join(ARTIFACTS, 'retry-paths.json'), `${JSON.stringify(paths, null, 2)}\n`);
      console.log(`[browser test] retry paths: ${JSON.stringify(paths)}`);
      await page.screenshot({ path: join(ARTIFACTS, 'checkout-replayed.png'), fullPage: true });
    });

    it('R2: past the published retention, "Send the last payment again" sends no payment: the page looks the key up and shows "Already paid at HH:MM (200)"', async () => {
      expect(paid, 'the payment of the previous test').toBeDefined();
      // Past the server's retention of the stored answer (counted from completion, R1).
      await sleep(Math.max(0, paid.at + RETENTION_MS + 300 - Date.now()));
      const attemptsBefore = (await logLines('attempt')).length;
      const lookupsBefore = (await logLines('lookup')).length;

      await page.locator('#retry').click();
      await page.locator('#result[data-state="already-paid"]').waitFor({ timeout: 10_000 });

      expect(await result().getAttribute('data-code')).toBe('reconciled_executed');
      expect(await result().getAttribute('data-key')).toBe(paid.key);
      const message = (await result().textContent())!;
      expect(message).toMatch(
        /^Already paid at \d\d:\d\d \(200\): this payment went through, and was not sent again\.$/,
      );
      // No payment left the browser: one lookup of the key (GET idempotency.status), still one charge.
      expect(await logLines('attempt')).toHaveLength(attemptsBefore);
      const lookups = (await logLines('lookup')).slice(lookupsBefore);
      expect(lookups).toEqual([expect.stringMatching(/GET \/trpc\/idempotency\.status$/)]);
      expect(await ledger(api.url)).toHaveLength(1);
      await page.screenshot({ path: join(ARTIFACTS, 'checkout-already-paid.png'), fullPage: true });
    });

    it('A1: the same key sent anyway past the retention charges again (the incident); the admin timeline draws both generations', async () => {
      expect(paid, 'the payment of the previous tests').toBeDefined();
      // What a client without the deadline does: the same key, past the retention.
      const late = await mutate(
        api.url,
        'payments.create',
        { amount: 4200, currency: 'EUR' },
        { 'idempotency-key': paid.key, authorization: 'Bearer alice' },
      );
      expect(late.status).toBe(200);
      expect(late.headers.get('idempotent-replayed')).toBeNull();
      expect(await ledger(api.url)).toHaveLength(2);

      const admin = await browser.newContext({
        viewport: { width: 1180, height: 700 },
        httpCredentials: { username: 'admin', password: ADMIN_TOKEN },
      });
      const timeline = await admin.newPage();
      const response = await timeline.goto(
        `${api.url}/admin/timeline?scope=${encodeURIComponent('alice/payments.create')}&key=${encodeURIComponent(paid.key)}`,
      );
      expect(response?.status()).toBe(200);

      const generations = timeline.locator('svg.timeline g.generation');
      expect(await generations.count()).toBe(2);
      for (const n of [1, 2]) {
        const lane = timeline.locator(`g.generation[data-generation="${n}"]`);
        expect(await lane.locator('[data-event="first-seen"]').count()).toBe(1);
        expect(await lane.locator('[data-event="completed"]').count()).toBe(1);
        expect(await lane.locator('[data-event="retained"]').boundingBox()).not.toBeNull();
      }
      const first = timeline.locator('g.generation[data-generation="1"]');
      expect(await first.locator('[data-event="expired"]').count()).toBe(1);
      expect(await first.locator('[data-event="reused"]').count()).toBe(1);
      expect(await first.locator('[data-event="archived"]').count()).toBe(1);
      // Drawn in time order: generation 2 starts right of where generation 1's retention ended.
      const expiredX = (await first.locator('[data-event="expired"]').boundingBox())!.x;
      const secondX = (await timeline
        .locator('g.generation[data-generation="2"] [data-event="first-seen"]')
        .boundingBox())!.x;
      expect(secondX).toBeGreaterThan(expiredX);
      await expect(timeline.locator('.verdict').textContent()).resolves.toContain(
        'The handler ran 2 times for this key.',
      );
      await timeline.screenshot({ path: join(ARTIFACTS, 'timeline.png'), fullPage: true });
      await admin.close();
    });
  },
);
