/**
 * `openDatabase` and the CLI on every driver: the URL names the dialect, the driver is the first
 * of its drivers that is installed (PostgreSQL: pg, then postgres; SQLite files: better-sqlite3,
 * then @libsql/client) or the one `driver` / `--driver` names. "Not installed" is a package that
 * does not resolve (fixtures/hide-packages.mjs), as in an app that never installed it.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomUUID } from 'node:crypto';
import { sql } from 'drizzle-orm';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { createDrizzleStore, migrate } from '../src/index.ts';
import { DatabaseUrlError, openDatabase, parseDatabaseUrl } from '../src/connect.ts';
import { DRIVERS } from './drivers.ts';
import { claimed } from './store-behaviour.ts';

const ROOT = fileURLToPath(new URL('../../..', import.meta.url));
const BIN = 'packages/drizzle/bin/idem.js';
const HIDE = fileURLToPath(new URL('./fixtures/hide-packages.mjs', import.meta.url));
const server = DRIVERS.find((spec) => spec.name === 'node-postgres')!;

const directories: string[] = [];
afterAll(() => {
  for (const directory of directories) rmSync(directory, { recursive: true, force: true });
});
const scratchFile = () => {
  const directory = mkdtempSync(join(tmpdir(), 'idem-connect-'));
  directories.push(directory);
  return join(directory, 'idem.db');
};

/** `idem …` in a child process, with `hidden` packages unresolvable. */
function idem(
  args: string[],
  databaseUrl: string,
  hidden: string[] = [],
): Promise<{ code: number; stdout: string; stderr: string }> {
  const env = { ...process.env, DATABASE_URL: databaseUrl, IDEM_HIDE_PACKAGES: hidden.join(',') };
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--import', HIDE, BIN, ...args],
      { cwd: ROOT, env, timeout: 30_000 },
      (error, stdout, stderr) => {
        resolve({ code: error ? (typeof error.code === 'number' ? error.code : -1) : 0, stdout, stderr });
      },
    );
  });
}

describe('parseDatabaseUrl: dialects and drivers', () => {
  it("libsql:// is a remote libsql database; driver picks a driver of the URL's dialect", () => {
    expect(parseDatabaseUrl('libsql://idem-acme.turso.io?authToken=t')).toEqual({
      dialect: 'sqlite',
      remote: 'libsql://idem-acme.turso.io?authToken=t',
      driver: 'libsql',
    });
    expect(parseDatabaseUrl('file:./db.sqlite', { driver: 'libsql' })).toEqual({
      dialect: 'sqlite',
      path: './db.sqlite',
      driver: 'libsql',
    });
    expect(parseDatabaseUrl('postgres://app@db/app', { driver: 'postgres-js' })).toEqual({
      dialect: 'postgres',
      url: 'postgres://app@db/app',
      driver: 'postgres-js',
    });
  });

  it('a driver of another dialect is a one-line DatabaseUrlError, the password redacted', () => {
    expect(() => parseDatabaseUrl('postgres://app:s3cret@db/app', { driver: 'libsql' })).toThrow(
      new DatabaseUrlError(
        'driver libsql cannot open DATABASE_URL "postgres://app:***@db/app": use node-postgres or postgres-js',
      ),
    );
    expect(() => parseDatabaseUrl('libsql://idem-acme.turso.io', { driver: 'better-sqlite3' })).toThrow(
      /^driver better-sqlite3 cannot open .*: use libsql$/,
    );
  });
});

describe('openDatabase on each driver', () => {
  it('file: opens better-sqlite3 by default and libsql when asked, both in WAL mode; the store runs on each', async () => {
    for (const driver of [undefined, 'libsql'] as const) {
      const opened = await openDatabase(`file:${scratchFile()}`, { driver });
      try {
        expect(opened).toMatchObject({ dialect: 'sqlite', driver: driver ?? 'better-sqlite3' });
        if (opened.dialect !== 'sqlite') throw new Error('expected SQLite');
        const [mode] = (await opened.db.all<{ journal_mode: string }>(sql`PRAGMA journal_mode`)) as Array<{
          journal_mode: string;
        }>;
        expect(mode?.journal_mode).toBe('wal');
        await migrate(opened.db);
        const store = createDrizzleStore(opened.db);
        expect(store.driver).toBe(driver ?? 'better-sqlite3');
        claimed(
          await store.claim({
            scope: 's',
            key: randomUUID(),
            fingerprint: null,
            token: 't',
            leaseMs: 1000,
            retentionMs: 1000,
            expiredReuse: 'execute',
          }),
        );
      } finally {
        await opened.close();
      }
    }
  });

  // The class: a connection setting that depends on the file's history. better-sqlite3 left
  // alone opens a new file with synchronous = FULL and a file already in WAL mode with NORMAL
  // (SQLITE_DEFAULT_WAL_SYNCHRONOUS=1), so a file's first process and every later one differed.
  it('synchronous is what was asked, or the driver’s default, whatever opened the file before (property)', async () => {
    const LEVEL: Record<string, number> = { normal: 1, full: 2 };
    const open = fc.record({
      driver: fc.constantFrom('better-sqlite3' as const, 'libsql' as const),
      synchronous: fc.constantFrom(undefined, 'normal' as const, 'full' as const, 'FULL' as const, 'Normal' as const),
    });
    await fc.assert(
      fc.asyncProperty(fc.array(open, { minLength: 1, maxLength: 4 }), async (opens) => {
        const file = scratchFile();
        for (const { driver, synchronous } of opens) {
          const opened = await openDatabase(`file:${file}`, {
            driver,
            ...(synchronous === undefined ? {} : { synchronous: synchronous as 'normal' | 'full' }),
          });
          try {
            if (opened.dialect !== 'sqlite') throw new Error('expected SQLite');
            const [row] = (await opened.db.all(sql`PRAGMA synchronous`)) as Array<{ synchronous: number }>;
            const wanted = synchronous?.toLowerCase() ?? (driver === 'better-sqlite3' ? 'normal' : 'full');
            expect(row?.synchronous).toBe(LEVEL[wanted]);
          } finally {
            await opened.close();
          }
        }
      }),
      { numRuns: 25 },
    );
  });

  it('synchronous other than normal or full is a TypeError before any file is made; a remote libsql:// refuses it', async () => {
    for (const synchronous of ['off', 'extra', '', 2, null]) {
      const file = scratchFile();
      await expect(openDatabase(`file:${file}`, { synchronous: synchronous as unknown as 'normal' })).rejects.toThrow(
        /^\[idem\] openDatabase: synchronous must be 'normal' or 'full', got /,
      );
      expect(existsSync(file)).toBe(false);
    }
    await expect(openDatabase('libsql://example.turso.io', { synchronous: 'full' })).rejects.toThrow(TypeError);
  });

  it('libsql with create: false refuses a missing file instead of creating it', async () => {
    await expect(openDatabase(`file:${scratchFile()}`, { driver: 'libsql', create: false })).rejects.toThrow(
      /^\[idem\] no SQLite database at /,
    );
  });

  it.skipIf(!server.runs)(
    'postgres:// opens node-postgres by default and postgres-js when asked; migrate() runs on both',
    async () => {
      const target = await server.open({ schemaPrefix: 'idem_connect' });
      try {
        for (const driver of [undefined, 'postgres-js'] as const) {
          const opened = await openDatabase(target.child && 'url' in target.child ? target.child.url : '', {
            driver,
            max: 2,
          });
          try {
            expect(opened).toMatchObject({ dialect: 'postgres', driver: driver ?? 'node-postgres' });
            await migrate(opened.db);
            expect(createDrizzleStore(opened.db).driver).toBe(driver ?? 'node-postgres');
          } finally {
            await opened.close();
          }
        }
      } finally {
        await target.close();
      }
    },
  );
});

describe('the CLI picks the first installed driver', () => {
  it('file: without better-sqlite3 installed migrates through libsql; with neither, one line naming both, exit 1', async () => {
    const file = scratchFile();
    const migrated = await idem(['migrate'], `file:${file}`, ['better-sqlite3']);
    expect(migrated).toMatchObject({ code: 0, stderr: '', stdout: `migrated file:${file}\n` });
    const opened = await openDatabase(`file:${file}`, { driver: 'libsql' });
    if (opened.dialect !== 'sqlite') throw new Error('expected SQLite');
    try {
      expect(await opened.db.all(sql`SELECT name FROM sqlite_master WHERE name = 'idem_keys'`)).toHaveLength(1);
    } finally {
      await opened.close();
    }
    const neither = await idem(['migrate'], `file:${scratchFile()}`, ['better-sqlite3', '@libsql/client']);
    expect(neither.code).toBe(1);
    expect(neither.stderr).toMatch(
      /^idem: cannot open file:.*: SQLite needs one of its drivers, none of which is installed: npm install better-sqlite3@\^12 \(better-sqlite3\) or @libsql\/client \(libsql\)\n$/,
    );
  });

  it.skipIf(!server.runs)('postgres:// without pg installed migrates through postgres-js', async () => {
    const target = await server.open({ schemaPrefix: 'idem_connect' });
    try {
      const url = target.child && 'url' in target.child ? target.child.url : '';
      const run = await idem(['migrate'], url, ['pg']);
      expect(run.stderr).toBe('');
      expect(run.code).toBe(0);
      const [row] = await target.rows<{ n: number | string }>(sql`SELECT count(*) AS n FROM idem_keys`);
      expect(Number(row?.n)).toBe(0);
    } finally {
      await target.close();
    }
  });

  it('--driver that does not exist, or does not fit the URL, is bad usage: exit 2, one line', async () => {
    const unknown = await idem(['migrate', '--driver', 'sqlite3'], `file:${scratchFile()}`);
    expect(unknown).toMatchObject({
      code: 2,
      stdout: '',
      stderr:
        'idem: --driver must be one of node-postgres, postgres-js, better-sqlite3, libsql, mysql2, got "sqlite3"\n',
    });
    const mismatch = await idem(['migrate', '--driver', 'postgres-js'], 'file:/tmp/x.db');
    expect(mismatch).toMatchObject({
      code: 2,
      stdout: '',
      stderr: 'idem: driver postgres-js cannot open DATABASE_URL "file:/tmp/x.db": use better-sqlite3 or libsql\n',
    });
  });
});
