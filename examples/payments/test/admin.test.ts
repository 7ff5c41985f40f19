/**
 * The admin timeline page (A1), over real HTTP: off unless ADMIN_TOKEN is set (404), 401 without
 * the token or with a wrong one, and for a key reused past its retention both generations drawn.
 * The browser test (browser.test.ts) looks at the same page in Chromium.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase, type OpenedDatabase } from '@idem/drizzle/connect';
import { carriesAdminToken } from '../src/admin.ts';
import { get, migrateExample, mutate, newKey, sleep, startExample, type RunningExample } from './http.ts';

const TOKEN = 'correct-horse-battery-staple';
const PAYMENT = { amount: 4200, currency: 'EUR' };
const basic = (user: string, password: string) => `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;

let directory: string;
let opened: OpenedDatabase;
const running: RunningExample[] = [];

beforeAll(async () => {
  directory = mkdtempSync(join(tmpdir(), 'idem-example-admin-'));
  opened = await openDatabase(`file:${join(directory, 'payments.db')}`);
  await migrateExample(opened.db);
});
afterAll(async () => {
  for (const example of running) await example.close();
  await opened?.close();
  rmSync(directory, { recursive: true, force: true });
});

async function start(env: Record<string, string>) {
  const example = await startExample(opened.db, env);
  running.push(example);
  return example;
}

const timelinePath = (scope: string, key: string) =>
  `/admin/timeline?scope=${encodeURIComponent(scope)}&key=${encodeURIComponent(key)}`;

describe('/admin/timeline', () => {
  it('does not exist without ADMIN_TOKEN: 404, like any unknown path', async () => {
    const { url } = await start({});
    const reply = await get(url, timelinePath('alice/payments.create', 'k'), { authorization: `Bearer ${TOKEN}` });
    expect(reply.status).toBe(404);
    expect(reply.body).toMatchObject({ status: 404, title: 'Not Found' });
  });

  it.each([
    ['no credentials', undefined],
    ['a wrong Bearer token', 'Bearer not-the-token'],
    ['a wrong Basic password', basic('admin', 'nope')],
    ['the token as a Basic user name', basic(TOKEN, '')],
  ])('answers 401 with a Basic challenge for %s', async (_, authorization) => {
    const { url } = await start({ ADMIN_TOKEN: TOKEN });
    const reply = await get(url, timelinePath('alice/payments.create', 'k'), authorization ? { authorization } : {});
    expect(reply.status).toBe(401);
    expect(reply.headers.get('www-authenticate')).toMatch(/^Basic realm="payments admin"/);
    expect(reply.text).not.toContain('<svg');
  });

  it('asks for the scope and the key (400), refuses a bad key (400), and says when there is no record (404)', async () => {
    const { url } = await start({ ADMIN_TOKEN: TOKEN });
    const auth = { authorization: `Bearer ${TOKEN}` };
    expect((await get(url, '/admin/timeline?key=k', auth)).status).toBe(400);
    const bad = await get(url, timelinePath('alice/payments.create', 'a key'), auth);
    expect(bad.status).toBe(400);
    expect(bad.text).toContain('visible ASCII');
    const missing = await get(url, timelinePath('alice/payments.create', newKey()), auth);
    expect(missing.status).toBe(404);
    expect(missing.text).toContain('No record of key');
  });

  it('A1/R2: draws both generations of a key reused past its retention, and says the handler ran twice', async () => {
    const { url } = await start({ ADMIN_TOKEN: TOKEN, IDEM_TTL: '1s', IDEM_LEASE: '1s' });
    const key = newKey();
    const headers = { 'idempotency-key': key, authorization: 'Bearer alice' };
    expect((await mutate(url, 'payments.create', PAYMENT, headers)).status).toBe(200);
    await sleep(1300);
    const late = await mutate(url, 'payments.create', PAYMENT, headers);
    expect(late.headers.get('idempotent-replayed')).toBeNull();

    for (const authorization of [`Bearer ${TOKEN}`, basic('admin', TOKEN)]) {
      const page = await get(url, timelinePath('alice/payments.create', key), { authorization });
      expect(page.status).toBe(200);
      expect(page.headers.get('content-type')).toBe('text/html; charset=utf-8');
      expect(page.text.match(/<g class="generation" data-generation="\d+">/g)).toEqual([
        '<g class="generation" data-generation="1">',
        '<g class="generation" data-generation="2">',
      ]);
      expect(page.text).toContain('data-event="reused"');
      expect(page.text).toContain('data-executions="2"');
      expect(page.text).toContain('The handler ran 2 times for this key.');
    }
  });

  it('escapes what the request names: a scope is shown as text, never as markup', async () => {
    const { url } = await start({ ADMIN_TOKEN: TOKEN });
    const reply = await get(url, timelinePath('<script>alert(1)</script>', 'k'), { authorization: `Bearer ${TOKEN}` });
    expect(reply.status).toBe(404);
    expect(reply.text).not.toContain('<script>alert(1)</script>');
    expect(reply.text).toContain('&lt;script&gt;');
  });
});

describe('carriesAdminToken', () => {
  it('takes Bearer, or Basic with the token as password, and nothing else', () => {
    expect(carriesAdminToken(`Bearer ${TOKEN}`, TOKEN)).toBe(true);
    expect(carriesAdminToken(basic('anyone', TOKEN), TOKEN)).toBe(true);
    expect(carriesAdminToken(TOKEN, TOKEN)).toBe(false);
    expect(carriesAdminToken(`Bearer ${TOKEN}x`, TOKEN)).toBe(false);
    expect(carriesAdminToken('Basic !!!', TOKEN)).toBe(false);
  });
});
