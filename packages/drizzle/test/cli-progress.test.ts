/**
 * R3: progress of `idem sweep` and `idem purge` on long work, on SQLite, PostgreSQL and MySQL:
 * off a terminal one line every --log-every batches and the total; on a terminal (a pseudo-TTY
 * from `script -qc`) a line redrawn in place; with --json one object at the end; Ctrl-C (SIGINT)
 * stops after the current batch, says how far it got and exits 130.
 */
import { execFile, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createDrizzleStore, migrate, type DrizzleDatabase, type DrizzleStore } from '../src/index.ts';
import { BIN, idemCli, ROOT } from './cli-run.ts';
import { mysqlSuitesRun, openMysqlTarget } from './mysql-target.ts';
import { isServerReachable, openPostgresTarget, postgresRequired } from './pg-target.ts';
import { openSqliteConnection } from './sqlite-target.ts';

vi.setConfig({ testTimeout: 120_000 });

interface Target {
  url: string;
  db: DrizzleDatabase;
  dialect: 'sqlite' | 'postgres' | 'mysql';
  close(): Promise<void>;
}

async function sqliteTarget(): Promise<Target> {
  const directory = mkdtempSync(join(tmpdir(), 'idem-progress-'));
  const file = join(directory, 'idem.db');
  const connection = openSqliteConnection(file);
  return {
    url: `file:${file}`,
    db: connection.db,
    dialect: 'sqlite',
    async close() {
      connection.client.close();
      rmSync(directory, { recursive: true, force: true });
    },
  };
}

async function postgresTarget(): Promise<Target> {
  const target = await openPostgresTarget({ max: 2, schemaPrefix: 'idem_progress' });
  return { url: target.url!, db: target.db, dialect: 'postgres', close: () => target.close() };
}

async function mysqlTarget(): Promise<Target> {
  const target = await openMysqlTarget({ connectionLimit: 2, prefix: 'idem_progress' });
  return { url: target.url, db: target.db, dialect: 'mysql', close: () => target.close() };
}

const postgresServer = (await isServerReachable()) || postgresRequired();
const mysqlServer = await mysqlSuitesRun();

const TARGETS = [
  { database: 'SQLite', open: sqliteTarget, skip: false },
  { database: 'PostgreSQL', open: postgresTarget, skip: !postgresServer },
  { database: 'MySQL', open: mysqlTarget, skip: !mysqlServer },
];

const COLUMNS = sql.raw(
  'scope, generation, fingerprint, state, token, created_at, lease_until, expires_at, completed_at, archived_at, takeovers, outcome_kind, outcome_status, body',
);

/** The child's environment: DATABASE_URL only, as a user's shell has it. */
function childEnv(url: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, DATABASE_URL: url };
  delete env.IDEM_TABLE_PREFIX;
  return env;
}

describe.each(TARGETS)('idem sweep and purge progress on $database', ({ open, skip }) => {
  let target: Target;
  let store: DrizzleStore;

  beforeAll(async () => {
    if (skip) return;
    target = await open();
    await migrate(target.db);
    store = createDrizzleStore(target.db);
  });
  afterAll(async () => {
    await target?.close();
  });

  /**
   * `count` (at most 3601) completed records in a fresh scope, past their 1 ms retention: one
   * through the store, the rest copied from it in SQL (MariaDB caps recursion at 1000 rows).
   */
  async function expired(count: number): Promise<string> {
    const scope = `progress|${randomUUID()}`;
    const token = randomUUID();
    const claim = await store.claim({
      scope,
      key: 'k',
      fingerprint: null,
      token,
      leaseMs: 30_000,
      retentionMs: 1,
      expiredReuse: 'execute',
    });
    expect(claim.outcome).toBe('claimed');
    expect(
      await store.complete({ scope, key: 'k', token, outcome: { kind: 'success', status: 200, body: '{}' } }),
    ).toBe(true);
    const key =
      target.dialect === 'mysql' ? sql.raw("CONCAT(`key`, a.i, '-', b.i)") : sql.raw(`"key" || a.i || '-' || b.i`);
    const keyColumn = sql.raw(target.dialect === 'mysql' ? '`key`' : '"key"');
    const copy = sql`INSERT INTO idem_keys (${keyColumn}, ${COLUMNS})
      WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 60)
      SELECT ${key}, ${COLUMNS} FROM idem_keys, n a, n b WHERE scope = ${scope} LIMIT ${count - 1}`;
    if (target.dialect === 'sqlite') await (target.db as { run(q: unknown): unknown }).run(copy);
    else await (target.db as { execute(q: unknown): Promise<unknown> }).execute(copy);
    await new Promise((resolve) => setTimeout(resolve, 20)); // past the 1 ms retention
    return scope;
  }

  it.skipIf(skip)(
    'off a terminal: a line every --log-every batches, then the total; nothing on stderr; purge --json is one object',
    async () => {
      await expired(30);
      const run = await idemCli(['sweep', '--batch-size', '5', '--log-every', '2'], target.url);
      expect(run.stderr).toBe('');
      expect(run.code).toBe(0);
      const lines = run.stdout.trimEnd().split('\n');
      expect(lines).toHaveLength(4);
      expect(lines[0]).toMatch(/^sweep: 10 records archived, 2 batches, \d+\/s$/);
      expect(lines[1]).toMatch(/^sweep: 20 records archived, 4 batches, \d+\/s$/);
      expect(lines[2]).toMatch(/^sweep: 30 records archived, 6 batches, \d+\/s$/);
      expect(lines[3]).toBe('archived 30 expired records');

      await new Promise((resolve) => setTimeout(resolve, 20));
      const purge = await idemCli(['purge', '--older-than', '1ms', '--json'], target.url);
      expect(purge.stderr).toBe('');
      expect(purge.code).toBe(0);
      expect(purge.stdout.trimEnd().split('\n')).toHaveLength(1);
      expect(JSON.parse(purge.stdout)).toMatchObject({
        command: 'purge',
        olderThan: '1ms',
        deleted: 30,
        stopped: 'done',
      });
    },
  );

  it.skipIf(skip)('sweep --json is one object with the totals', async () => {
    await expired(7);
    const run = await idemCli(['sweep', '--batch-size', '3', '--json'], target.url);
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout)).toMatchObject({
      command: 'sweep',
      skipped: false,
      archived: 7,
      batches: 3,
      stopped: 'done',
    });
  });

  it.skipIf(skip)('on a terminal (script -qc): the progress line is redrawn in place, then the total', async () => {
    await expired(12);
    const output = await new Promise<{ code: number; text: string }>((resolve) => {
      execFile(
        'script',
        ['-qc', `${JSON.stringify(process.execPath)} ${JSON.stringify(BIN)} sweep --batch-size 4`, '/dev/null'],
        { cwd: ROOT, env: childEnv(target.url), timeout: 60_000 },
        (error, stdout) => resolve({ code: error ? Number(error.code) : 0, text: stdout }),
      );
    });
    expect(output.code).toBe(0);
    // `\r` and ESC [ K: back to the start of the line, and clear it.
    const redraw = '\r\u001b[K';
    expect(output.text).toContain(`${redraw}sweep: 4 records archived, 1 batch, `);
    expect(output.text.split(redraw).at(-1)).toMatch(/^archived 12 expired records\r?\n$/);
    // Off the terminal the same run prints no redraws at all (the test above).
  });

  it.skipIf(skip)(
    'Ctrl-C (SIGINT) stops after the current batch, says how far it got, exits 130, and leaves the rest for the next run',
    async () => {
      const scope = await expired(3000);
      const child = spawn(process.execPath, [BIN, 'sweep', '--batch-size', '1', '--log-every', '1'], {
        cwd: ROOT,
        env: childEnv(target.url),
      });
      let stdout = '';
      let signalled = false;
      child.stdout.on('data', (chunk: Buffer) => {
        stdout += chunk.toString();
        if (!signalled && stdout.includes('\n')) {
          signalled = true;
          child.kill('SIGINT');
        }
      });
      let stderr = '';
      child.stderr.on('data', (chunk: Buffer) => {
        stderr += chunk.toString();
      });
      const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
      expect(stderr).toBe('');
      expect(code).toBe(130);
      const last = stdout.trimEnd().split('\n').at(-1)!;
      const match =
        /^interrupted: archived (\d+) expired records? in (\d+) batch(es)? before Ctrl-C; run idem sweep again for the rest$/.exec(
          last,
        );
      expect(match, last).not.toBeNull();
      const archived = Number(match![1]);
      expect(archived).toBeGreaterThan(0);
      expect(archived).toBeLessThan(3000);
      const rest = await idemCli(['sweep', '--json'], target.url);
      expect(JSON.parse(rest.stdout)).toMatchObject({ archived: 3000 - archived, stopped: 'done' });
      expect((await store.get(scope, 'k'))?.state).toBe('archived');
    },
  );
});
