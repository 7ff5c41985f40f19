/**
 * In-process units of the CLI's building blocks: DATABASE_URL parsing and opening (shared with
 * the payments example), argument parsing, and the text of `idem explain` (A1).
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { TimelineEntry } from '@idem/core/store';
import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { explainTimeline, renderTimelineTable } from '../src/cli/explain.ts';
import { formatDuration } from '@idem/core';
import { renderTable } from '../src/cli/format.ts';
import { commandHelp, parseInvocation, usage } from '../src/cli/index.ts';
import { DatabaseUrlError, openDatabase, parseDatabaseUrl, redactDatabaseUrl } from '../src/connect.ts';
import { migrate } from '../src/index.ts';

describe('parseDatabaseUrl', () => {
  it.each([
    ['file:/var/lib/app/idem.db', { dialect: 'sqlite', path: '/var/lib/app/idem.db' }],
    ['file:relative/idem.data', { dialect: 'sqlite', path: 'relative/idem.data' }],
    [pathToFileURL('/tmp/with space/idem.db').href, { dialect: 'sqlite', path: '/tmp/with space/idem.db' }],
    ['./idem.db', { dialect: 'sqlite', path: './idem.db' }],
    ['/data/idem.SQLITE', { dialect: 'sqlite', path: '/data/idem.SQLITE' }],
    ['  /data/idem.db  ', { dialect: 'sqlite', path: '/data/idem.db' }],
    ['postgres://app:pw@db:5432/app', { dialect: 'postgres', url: 'postgres://app:pw@db:5432/app' }],
    ['postgresql://db/app?sslmode=require', { dialect: 'postgres', url: 'postgresql://db/app?sslmode=require' }],
    ['POSTGRES://db/app', { dialect: 'postgres', url: 'POSTGRES://db/app' }],
    ['mysql://app:pw@db:3306/app', { dialect: 'mysql', url: 'mysql://app:pw@db:3306/app' }],
  ])('%s selects %o', (value, expected) => {
    expect(parseDatabaseUrl(value)).toEqual(expected);
  });

  it('unset or blank selects the default SQLite file when one is given, and is a one-line DatabaseUrlError otherwise', () => {
    expect(parseDatabaseUrl(undefined, { defaultSqlitePath: '/srv/app.db' })).toEqual({
      dialect: 'sqlite',
      path: '/srv/app.db',
    });
    expect(parseDatabaseUrl('  ', { defaultSqlitePath: '/srv/app.db' })).toEqual({
      dialect: 'sqlite',
      path: '/srv/app.db',
    });
    expect(() => parseDatabaseUrl(undefined)).toThrow(
      new DatabaseUrlError('set DATABASE_URL (file:<path>, <path>.db, postgres://… or postgresql://…, mysql://…)'),
    );
  });

  it.each([
    [
      'mongodb://app:s3cret@db/app',
      /^DATABASE_URL "mongodb:\/\/app:\*\*\*@db\/app" is neither postgres:\/\/…, postgresql:\/\/…, mysql:\/\/…, libsql:\/\/…, file:<path> nor a path ending in \.db or \.sqlite$/,
    ],
    ['idem.txt', /is neither/],
    ['file:', /^DATABASE_URL "file:" names no file$/],
    ['file://remote-host/idem.db', /^DATABASE_URL "file:\/\/remote-host\/idem\.db" is not a valid file URL/],
  ])('%s is a DatabaseUrlError', (value, message) => {
    let thrown: unknown;
    try {
      parseDatabaseUrl(value);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(DatabaseUrlError);
    expect((thrown as Error).message).toMatch(message);
    expect((thrown as Error).message).not.toContain('\n');
  });

  it('names the value as the caller calls it', () => {
    expect(() => parseDatabaseUrl('nope', { name: '--database' })).toThrow(/^--database "nope"/);
  });
});

describe('redactDatabaseUrl', () => {
  it('hides the password in the authority and in a password parameter, and shows parameters decoded', () => {
    expect(redactDatabaseUrl('postgres://app:s3cret@db:5432/app?options=-c%20search_path%3Dx&password=p2')).toBe(
      'postgres://app:***@db:5432/app?options=-c search_path=x&password=***',
    );
    expect(redactDatabaseUrl('postgres://postgres@127.0.0.1:1/x')).toBe('postgres://postgres@127.0.0.1:1/x');
    expect(redactDatabaseUrl('postgres://app:pw@[bad')).toBe('postgres://<unparsable>');
  });
});

describe('openDatabase', () => {
  it('opens SQLite in WAL mode with no synchronous busy wait (the store retries asynchronously), creating the missing directory; the store migrates on it', async () => {
    const directory = mkdtempSync(join(tmpdir(), 'idem-open-'));
    const file = join(directory, 'a', 'b', 'idem.db');
    try {
      const opened = await openDatabase(`file:${file}`);
      expect(opened.dialect).toBe('sqlite');
      expect(opened.description).toBe(`file:${file}`);
      expect(existsSync(file)).toBe(true);
      if (opened.dialect !== 'sqlite') throw new Error('unreachable');
      expect(opened.db.get(sql`PRAGMA journal_mode`)).toEqual({ journal_mode: 'wal' });
      expect(opened.db.get(sql`PRAGMA busy_timeout`)).toEqual({ timeout: 0 });
      await migrate(opened.db);
      await opened.close();
      await opened.close();
      await expect(
        openDatabase({ dialect: 'sqlite', path: join(directory, 'missing.db') }, { create: false }),
      ).rejects.toThrow();
      expect(existsSync(join(directory, 'missing.db'))).toBe(false);
    } finally {
      rmSync(directory, { recursive: true, force: true });
    }
  });

  it('opens PostgreSQL as a lazy pool: no connection until the first query, the description redacted, close idempotent', async () => {
    const opened = await openDatabase('postgres://idem:s3cret@127.0.0.1:1/x', { connectionTimeoutMillis: 1000 });
    expect(opened.dialect).toBe('postgres');
    expect(opened.description).toBe('postgres://idem:***@127.0.0.1:1/x');
    if (opened.dialect !== 'postgres') throw new Error('unreachable');
    await expect(opened.db.execute(sql`SELECT 1`)).rejects.toThrow();
    await opened.close();
    await opened.close();
  });
});

describe('idem arguments', () => {
  it('parses each command with its options and defaults', () => {
    expect(parseInvocation(['sweep'])).toEqual({
      command: 'sweep',
      database: undefined,
      tables: {},
      batchSize: 1000,
      logEvery: 100,
      json: false,
    });
    expect(parseInvocation(['sweep', '--batch-size=250', '--database', 'x.db', '--log-every', '10', '--json'])).toEqual(
      {
        command: 'sweep',
        database: 'x.db',
        tables: {},
        batchSize: 250,
        logEvery: 10,
        json: true,
      },
    );
    expect(parseInvocation(['purge', '--older-than', '90d'])).toEqual({
      command: 'purge',
      database: undefined,
      tables: {},
      olderThanMs: 90 * 86_400_000,
      olderThan: '90d',
      logEvery: 100,
      json: false,
    });
    expect(parseInvocation(['explain', 'k', '--scope', 's', '--json'])).toEqual({
      command: 'explain',
      database: undefined,
      tables: {},
      key: 'k',
      scope: 's',
      json: true,
    });
    expect(parseInvocation(['explain', '--', '-odd-key'])).toMatchObject({ key: '-odd-key' });
    expect(parseInvocation(['policy', '--url', 'https://api.example/idempotency'])).toEqual({
      command: 'policy',
      database: undefined,
      tables: {},
      url: 'https://api.example/idempotency',
      json: false,
    });
    expect(parseInvocation(['migrate', '--help'])).toEqual({ command: 'help', topic: 'migrate' });
    expect(parseInvocation(['help', 'sweep'])).toEqual({ command: 'help', topic: 'sweep' });
    expect(parseInvocation(['--help'])).toEqual({ command: 'help' });
    expect(parseInvocation(['--version'])).toEqual({ command: 'version' });
    expect(parseInvocation(['sweep', '--prefix', 'app_', '--config=conf/drizzle.config.ts'])).toMatchObject({
      command: 'sweep',
      tables: { prefix: 'app_', config: 'conf/drizzle.config.ts' },
    });
    expect(parseInvocation(['explain', 'k', '--prefix='])).toMatchObject({ tables: { prefix: '' } });
  });

  it('help <command> of every command shows its synopsis, its options and at least one example, each a line that parses', () => {
    for (const name of ['migrate', 'sweep', 'purge', 'explain', 'policy', 'stats', 'doctor'] as const) {
      const text = commandHelp(name);
      expect(text).toMatch(new RegExp(`^Usage: idem ${name}`));
      const examples = text
        .slice(text.search(/^Examples?:$/m))
        .split('\n')
        .slice(1)
        .filter(Boolean);
      expect(examples.length).toBeGreaterThan(0);
      for (const example of examples) {
        const argv = [...example.matchAll(/'([^']*)'|(\S+)/g)].map((m) => m[1] ?? m[2]!);
        const at = argv.indexOf('idem');
        expect(at, example).toBeGreaterThan(-1);
        expect(parseInvocation(argv.slice(at + 1))).toMatchObject({ command: name });
      }
    }
    expect(usage()).toContain('help [<command>]');
  });

  it.each([
    [['sweep', '--batch-size', '0'], /--batch-size must be a whole number/],
    [['sweep', '--batch-size', '1.5'], /--batch-size must be a whole number/],
    [['sweep', '--batch-size'], /^--batch-size needs a value$/],
    [['purge'], /^purge needs --older-than/],
    [['purge', '--older-than', '-1d'], /^--older-than needs a value/],
    [['purge', '--older-than', '0d'], /^--older-than must be a duration/],
    [['explain', ''], /^explain needs a key/],
    [['explain', 'k', '--scope', ''], /^--scope needs a non-empty value$/],
    [['migrate', 'now'], /^migrate takes no arguments, got "now"$/],
    [['purge', '--older-than', '1d', '--scope', 's'], /^--scope does not apply to purge/],
    [['sweep', '--log-every', '0'], /^--log-every must be a whole number of batches from 1, got "0"$/],
    [['policy', '--url', 'ftp://x'], /^--url must be an http/],
    [['sweep', '--url', 'https://x'], /^--url does not apply to sweep \(idem help sweep shows how\)$/],
    [['explain', 'k', '--json=yes'], /^--json takes no value$/],
    [['explain', 'k', '--scope', '--json'], /^--scope needs a value \(write --scope=<value>/],
    [['explain', 'k', '-q'], /^unknown option -q/],
    [['sweep', '--prefix'], /^--prefix needs a value$/],
    [['help', 'refund'], /^unknown command "refund"/],
  ])('%j is bad usage', (argv, message) => {
    expect(() => parseInvocation(argv)).toThrow(message);
    try {
      parseInvocation(argv);
    } catch (error) {
      expect((error as { exitCode?: number }).exitCode).toBe(2);
    }
  });
});

describe('idem explain text (A1)', () => {
  const at = (iso: string) => new Date(iso);
  const entry = (overrides: Partial<TimelineEntry>): TimelineEntry => ({
    generation: 1,
    state: 'completed',
    fingerprint: 'f',
    firstSeenAt: at('2026-03-01T10:00:00.000Z'),
    completedAt: at('2026-03-01T10:00:01.250Z'),
    status: 200,
    outcomeKind: 'success',
    expiresAt: at('2026-03-02T10:00:00.000Z'),
    archivedAt: null,
    reusedAt: null,
    takeovers: 0,
    waits: 0,
    onFailure: 'replay',
    attempts: 1,
    steps: [],
    ...overrides,
  });
  const now = at('2026-03-05T00:00:00.000Z');

  it('tells how a swept, expired key came back and ran again; a single generation needs no story', () => {
    const generations = [
      entry({
        state: 'archived',
        archivedAt: at('2026-03-02T10:05:00.000Z'),
        reusedAt: at('2026-03-03T12:30:00.000Z'),
        takeovers: 1,
        attempts: 2,
        waits: 3,
      }),
      entry({
        generation: 2,
        firstSeenAt: at('2026-03-03T12:30:00.000Z'),
        completedAt: null,
        status: null,
        outcomeKind: null,
        state: 'processing',
        expiresAt: at('2026-03-06T00:00:00.000Z'),
      }),
    ];
    expect(explainTimeline(generations, now)).toBe(
      'Generation 1, first seen at 2026-03-01T10:00:00.000Z, completed with 200 at 2026-03-01T10:00:01.250Z; its claim was taken over once after a lease lapsed (E6); ' +
        'its handler started 2 times (1 takeover); ' +
        '3 duplicates waited for its outcome instead of answering 409 (E3w); ' +
        'its retention ended at 2026-03-02T10:00:00.000Z; the sweeper archived it at 2026-03-02T10:05:00.000Z; ' +
        'the key was reused at 2026-03-03T12:30:00.000Z, 26h 30m after its retention ended, and executed again as generation 2. ' +
        'Generation 2, first seen at 2026-03-03T12:30:00.000Z, has no outcome yet (still processing); its retention ends at 2026-03-06T00:00:00.000Z.',
    );
    expect(explainTimeline([entry({ waits: 3 })], now)).toBe('');
    expect(renderTimelineTable(generations, now).split('\n')).toEqual([
      'generation  first seen                completed                 status             expired                             archived                  reused                    waits  on failure   attempts  steps',
      '1           2026-03-01T10:00:00.000Z  2026-03-01T10:00:01.250Z  200 success        yes, at 2026-03-02T10:00:00.000Z    2026-03-02T10:05:00.000Z  2026-03-03T12:30:00.000Z  3      replay (v1)  2         —',
      '2           2026-03-03T12:30:00.000Z  —                         none (processing)  no, until 2026-03-06T00:00:00.000Z  —                         —                         0      replay (v1)  1         —',
    ]);
  });

  it('E8: shows the mode, the attempts, the step names (never their results) and the resumable state, with a story for a single generation that ran more than once', () => {
    const resumable = entry({
      state: 'resumable',
      completedAt: null,
      status: 503,
      outcomeKind: 'error',
      onFailure: 'resume',
      attempts: 3,
      takeovers: 1,
      steps: ['reserve', 'charge', 'notify', 'ledger', 'receipt', 'audit'],
    });
    expect(renderTimelineTable([resumable], now).split('\n')).toEqual([
      'generation  first seen                completed  status                expired                           archived  reused  waits  on failure   attempts  steps',
      '1           2026-03-01T10:00:00.000Z  —          503 error, resumable  yes, at 2026-03-02T10:00:00.000Z  —         —       0      resume (v2)  3         reserve, charge, notify, ledger +2 more',
    ]);
    expect(explainTimeline([resumable], now)).toBe(
      'Generation 1, first seen at 2026-03-01T10:00:00.000Z, failed with 503 (an error) and is resumable: a retry with the same key and payload runs it again, skipping its completed steps (E8); ' +
        'its claim was taken over once after a lease lapsed (E6); its handler started 3 times (1 takeover and 1 resumed retry); ' +
        'it completed 6 steps, in this order: reserve, charge, notify, ledger, receipt, audit (E8: a step that completed is not run again by a later attempt); ' +
        'its retention ended at 2026-03-02T10:00:00.000Z.',
    );
    expect(explainTimeline([entry({ steps: ['reserve'] })], now)).toBe('');
  });

  it('spans read as a person says them, tables align on the widest cell', () => {
    expect([250, 1500, 61_000, 3_600_000, 93_784_000, 3 * 86_400_000].map(formatDuration)).toEqual([
      '250ms',
      '1.5s',
      '1m 1s',
      '1h',
      '26h 3m',
      '3d',
    ]);
    expect(
      renderTable(
        ['a', 'bb'],
        [
          ['xxx', 'y'],
          ['', ''],
        ],
      ),
    ).toBe('a    bb\nxxx  y\n');
  });
});
