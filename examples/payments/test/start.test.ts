/**
 * The real entry point, started as a user would (`node --import tsx examples/payments/src/main.ts`
 * from the repository root, as `npm start` does): configuration from the environment,
 * migrations on start, `[idem]` event lines on stdout, a clean stop on SIGTERM, and a one-line
 * `[payments] cannot start: …` for a bad configuration.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { openPostgresTarget } from '../../../packages/drizzle/test/pg-target.ts';
import { ledger, mutate, newKey } from './http.ts';

const ROOT = fileURLToPath(new URL('../../..', import.meta.url));
const MAIN = 'examples/payments/src/main.ts';
const PAYMENT = { amount: 4200, currency: 'EUR' };

interface Started {
  child: ChildProcess;
  url: string;
  /** Every stdout line so far. */
  stdout: string[];
  exited: Promise<{ code: number | null; stderr: string }>;
}

const children = new Set<ChildProcess>();
const directories: string[] = [];

afterAll(() => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  for (const directory of directories) rmSync(directory, { recursive: true, force: true });
});

function run(env: Record<string, string>): { child: ChildProcess; stdout: string[]; exited: Started['exited'] } {
  const child = spawn(process.execPath, ['--import', 'tsx', MAIN], {
    cwd: ROOT,
    env: { ...process.env, PORT: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.add(child);
  const stdout: string[] = [];
  let stderr = '';
  createInterface({ input: child.stdout! }).on('line', (line) => stdout.push(line));
  child.stderr!.on('data', (chunk) => (stderr += chunk));
  const exited = new Promise<{ code: number | null; stderr: string }>((resolve) =>
    child.once('close', (code) => resolve({ code, stderr })),
  );
  return { child, stdout, exited };
}

/** Starts main.ts and waits for `[payments] listening on http://localhost:<port>`. */
async function start(env: Record<string, string>): Promise<Started> {
  const started = run(env);
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setInterval(() => {
      const port = started.stdout
        .map((line) => /^\[payments\] listening on http:\/\/localhost:(\d+) /.exec(line)?.[1])
        .find(Boolean);
      if (port) {
        clearInterval(timer);
        resolve(`http://127.0.0.1:${port}`);
      }
    }, 20);
    void started.exited.then(({ code, stderr }) => {
      clearInterval(timer);
      reject(new Error(`main.ts exited with ${code} before listening: ${stderr}`));
    });
  });
  return { ...started, url };
}

async function stop(started: Started): Promise<number | null> {
  started.child.kill('SIGTERM');
  return (await started.exited).code;
}

function temporaryDirectory(): string {
  const directory = mkdtempSync(join(tmpdir(), 'idem-example-'));
  directories.push(directory);
  return directory;
}

describe('npm start (src/main.ts) on SQLite', () => {
  it('E2/R4: starts on a fresh SQLite file (migrations applied on start), replays a retry, publishes IDEM_TTL, logs every event as an [idem] line without the payload (K5), stops on SIGTERM, and still replays after a restart', async () => {
    const file = join(temporaryDirectory(), 'not-yet', 'payments.db');
    const server = await start({ DATABASE_URL: `file:${file}`, IDEM_TTL: '2m' });
    expect(server.stdout[0]).toContain(`store file:${file}`);
    expect(existsSync(file)).toBe(true);

    const key = newKey();
    const first = await mutate(server.url, 'payments.create', PAYMENT, { 'idempotency-key': key });
    expect(first.status).toBe(200);
    const retry = await mutate(server.url, 'payments.create', PAYMENT, { 'idempotency-key': key });
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.text).toBe(first.text);
    expect(await ledger(server.url)).toEqual([{ id: first.body.result.data.id, amount: 4200, currency: 'EUR' }]);

    const policy = await fetch(`${server.url}/idempotency`, { headers: { accept: 'application/json' } }).then(
      (response) => response.json(),
    );
    expect(
      policy.endpoints.map((endpoint: { retention: string; lease: string }) => [endpoint.retention, endpoint.lease]),
    ).toEqual([
      ['2m', '30s'],
      ['2m', '30s'],
      ['2m', '30s'],
    ]);

    expect(await stop(server)).toBe(0);
    const events = server.stdout
      .filter((line) => line.startsWith('[idem] '))
      .map((line) => JSON.parse(line.slice('[idem] '.length)));
    expect(events.map((event) => [event.type, event.scope, event.key])).toEqual([
      ['claimed', 'public/payments.create', key],
      ['completed', 'public/payments.create', key],
      ['replayed', 'public/payments.create', key],
    ]);
    // K5: no payload in the log. The amount as a JSON value, not as digits inside a number
    // (a durationMs such as 1.4388420000000224 holds "4200").
    expect(server.stdout.join('\n')).not.toMatch(/(?<![\d.])4200(?![\d.])|"EUR"/);

    // The same file named by a bare path ending in .db.
    const restarted = await start({ DATABASE_URL: file, IDEM_TTL: '2m' });
    const afterRestart = await mutate(restarted.url, 'payments.create', PAYMENT, { 'idempotency-key': key });
    expect(afterRestart.headers.get('idempotent-replayed')).toBe('true');
    expect(afterRestart.text).toBe(first.text);
    expect(await ledger(restarted.url)).toHaveLength(1);
    expect(await stop(restarted)).toBe(0);
  });

  it('R3: sweeps expired keys on its own (IDEM_SWEEP_EVERY), and not at all with IDEM_SWEEPER=off', async () => {
    const file = join(temporaryDirectory(), 'payments.db');
    const quiet = await start({ DATABASE_URL: `file:${file}`, IDEM_SWEEPER: 'off' });
    expect(await stop(quiet)).toBe(0);
    expect(quiet.stdout.join('\n')).not.toContain('sweep');

    const server = await start({ DATABASE_URL: `file:${file}`, IDEM_TTL: '1ms', IDEM_SWEEP_EVERY: '100ms' });
    // Waits for the lines (the test's timeout bounds a sweeper that never runs).
    const line = async (text: string) => {
      while (!server.stdout.includes(text)) await new Promise((resolve) => setTimeout(resolve, 50));
    };
    await line('[payments] sweeping expired keys every 100ms (IDEM_SWEEPER=off turns it off)');
    const key = newKey();
    expect((await mutate(server.url, 'payments.create', PAYMENT, { 'idempotency-key': key })).status).toBe(200);
    await line('[payments] swept 1 expired keys');
    expect(await stop(server)).toBe(0);
  });

  it.concurrent.for([
    ['IDEM_TTL=abc', { IDEM_TTL: 'abc' }, /^IDEM_TTL must be a duration such as 2s, 30m, 24h or 7d, got "abc"$/],
    ['PORT=http', { PORT: 'http' }, /^PORT must be an integer from 0 to 65535, got "http"$/],
    [
      'IDEM_SEMANTICS=v3 (E8)',
      { IDEM_SEMANTICS: 'v3' },
      /^IDEM_SEMANTICS must be v1 \(.*Stripe v1\) or v2 \(.*Stripe v2\), got "v3"$/,
    ],
    [
      'DATABASE_URL=mysql://db/app',
      { DATABASE_URL: 'mysql://db/app' },
      /^DATABASE_URL "mysql:\/\/db\/app" is MySQL: this example runs on SQLite or PostgreSQL$/,
    ],
    [
      'an unreachable PostgreSQL',
      { DATABASE_URL: 'postgres://postgres@127.0.0.1:1/payments' },
      /^migrating postgres:\/\/postgres@127\.0\.0\.1:1\/payments failed: connect ECONNREFUSED/,
    ],
  ] as const)(
    'with %s it exits 1 with one line "[payments] cannot start: …" and no stack trace',
    async ([, env, reason], { expect }) => {
      const { stdout, exited } = run({ DATABASE_URL: `file:${join(temporaryDirectory(), 'payments.db')}`, ...env });
      const { code, stderr } = await exited;
      expect(code).toBe(1);
      expect(stdout).toEqual([]);
      expect(stderr.endsWith('\n')).toBe(true);
      const lines = stderr.slice(0, -1).split('\n');
      expect(lines, stderr).toHaveLength(1);
      expect(lines[0]).toMatch(/^\[payments\] cannot start: /);
      expect(lines[0]!.slice('[payments] cannot start: '.length)).toMatch(reason);
    },
  );
});

describe('npm start (src/main.ts) on PostgreSQL', () => {
  it('E2: migrates a fresh schema on start and replays a retry', async (context) => {
    const target = await openPostgresTarget({ schemaPrefix: 'idem_example_start' });
    try {
      if (target.url === undefined)
        context.skip('PGlite runs in this process only: no DATABASE_URL for a child process');
      const server = await start({ DATABASE_URL: target.url! });
      const key = newKey();
      const first = await mutate(server.url, 'payments.create', PAYMENT, { 'idempotency-key': key });
      expect(first.status).toBe(200);
      const retry = await mutate(server.url, 'payments.create', PAYMENT, { 'idempotency-key': key });
      expect(retry.headers.get('idempotent-replayed')).toBe('true');
      expect(retry.text).toBe(first.text);
      expect(await ledger(server.url)).toHaveLength(1);
      expect(await stop(server)).toBe(0);
    } finally {
      await target.close();
    }
  });
});
