import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Logger } from 'drizzle-orm';
import { afterEach, describe, expect, it } from 'vitest';
import { createDrizzleStore, migrate, type DrizzleDatabase } from '../src/index.ts';
import { detectDialect } from '../src/dialect.ts';
import { defineSqliteTables } from '../src/sqlite/schema.ts';
import { SQLITE_MAX_GROUP } from '../src/sqlite/groups.ts';
import { sqliteStatements } from '../src/sqlite/statements.ts';
import type { FirstStep, StoreStatements } from '../src/store-statements.ts';
import { resolveTableNames } from '../src/table-names.ts';
import { holdSqliteWriteLock } from './sqlite-lock.ts';
import { CONCURRENT, groupCommitThroughTheStore } from './group-commit-behaviour.ts';
import { groupStatementsBehaviour, inserted, outcome, request } from './group-statements-behaviour.ts';

const GROUP = CONCURRENT;

/**
 * The commits among `statements` (what SQLite ran, better-sqlite3's verbose hook): a
 * transaction is one, and so is each write outside one (autocommit); reads commit nothing.
 */
function commits(statements: string[]): number {
  let count = 0;
  let inTransaction = false;
  for (const statement of statements) {
    if (/^begin\b/i.test(statement)) {
      inTransaction = true;
      count++;
    } else if (/^(commit|rollback|end)\b/i.test(statement)) inTransaction = false;
    else if (!inTransaction && /^(insert|update|delete)\b/i.test(statement)) count++;
  }
  return count;
}

/** Every statement sent, in order. */
class Counting implements Logger {
  statements: string[] = [];
  logQuery(query: string) {
    this.statements.push(query);
  }
  /** The statements sent by `run`. */
  async during(run: () => Promise<unknown>): Promise<string[]> {
    const start = this.statements.length;
    await run();
    return this.statements.slice(start);
  }
}

interface Opened {
  db: DrizzleDatabase;
  file: string;
  statements: StoreStatements;
  logger: Counting;
  close(): Promise<void>;
}

const opened: Opened[] = [];
afterEach(async () => {
  for (const each of opened.splice(0)) await each.close();
});

/** A fresh WAL file opened as `openDatabase` opens it, with a counting logger. */
async function open(driver: 'better-sqlite3' | 'libsql'): Promise<Opened> {
  const directory = mkdtempSync(join(tmpdir(), `idem-group-${driver}-`));
  const file = join(directory, 'idem.db');
  const logger = new Counting();
  let db: DrizzleDatabase;
  let end: () => Promise<void>;
  if (driver === 'better-sqlite3') {
    const [{ default: Database }, { drizzle }] = await Promise.all([
      import('better-sqlite3'),
      import('drizzle-orm/better-sqlite3'),
    ]);
    // What SQLite itself ran, the native transaction's BEGIN and COMMIT included (drizzle's logger misses those).
    const client = new Database(file, { timeout: 0, verbose: (query) => logger.logQuery(String(query)) });
    client.pragma('journal_mode = WAL');
    db = drizzle({ client });
    end = async () => void (client.open && client.close());
  } else {
    const [{ createClient }, { drizzle }] = await Promise.all([import('@libsql/client'), import('drizzle-orm/libsql')]);
    const client = createClient({ url: `file:${file}`, timeout: 5000 });
    await client.execute('PRAGMA journal_mode = WAL');
    db = drizzle({ client, logger });
    end = async () => client.close();
  }
  await migrate(db);
  const detected = detectDialect(db);
  if (detected.dialect !== 'sqlite') throw new Error('expected SQLite');
  const statements = sqliteStatements(detected.sqlite, defineSqliteTables(resolveTableNames({})), 5000);
  let closed = false;
  const each: Opened = {
    db,
    file,
    statements,
    logger,
    async close() {
      if (closed) return;
      closed = true;
      await end();
      rmSync(directory, { recursive: true, force: true });
    },
  };
  opened.push(each);
  return each;
}

for (const driver of ['better-sqlite3', 'libsql'] as const) {
  describe(`SQLite group commit (${driver})`, () => {
    groupStatementsBehaviour(() => open(driver));

    const grouping =
      driver === 'libsql'
        ? `${GROUP} fresh claims go as one read and one insert, and ${GROUP} completions as one update`
        : `${GROUP} fresh claims go as one transaction, and ${GROUP} completions as another`;
    it(`E1: ${grouping}`, async () => {
      const { statements: s, logger } = await open(driver);
      const requests = Array.from({ length: GROUP }, () => request());
      const completions = requests.map((r, i) => ({ scope: r.scope, key: r.key, token: r.token, outcome: outcome(i) }));
      let steps: Array<FirstStep | undefined> = [];
      let done: boolean[] = [];
      const claimStatements = await logger.during(async () => (steps = await s.claimOrReadMany!(requests)));
      const completeStatements = await logger.during(async () => (done = await s.completeMany!(completions)));
      expect(steps.map((step) => inserted(step).token)).toEqual(requests.map((r) => r.token));
      expect(steps.map((step) => inserted(step).key)).toEqual(requests.map((r) => r.key));
      expect(done).toEqual(requests.map(() => true));
      if (driver === 'libsql') {
        expect(claimStatements).toHaveLength(2);
        expect(claimStatements[0]).toMatch(/^select /i);
        expect(claimStatements[1]).toMatch(/^insert into .* on conflict .* do nothing returning/i);
        expect(completeStatements).toHaveLength(1);
        expect(completeStatements[0]).toMatch(/^update .* from \(values/i);
      } else {
        // In process and synchronous, a statement is a function call; what costs is the commit.
        const commits = (sent: string[]) => sent.filter((q) => /^(begin|commit)\b/i.test(q));
        expect(commits(claimStatements)).toEqual(['BEGIN IMMEDIATE', 'COMMIT']);
        expect(commits(completeStatements)).toEqual(['BEGIN IMMEDIATE', 'COMMIT']);
        expect(claimStatements).toHaveLength(2 + 2 * GROUP);
        expect(completeStatements).toHaveLength(2 + GROUP);
      }
    });

    it('refuses a group over the bound-parameter cap before writing anything', async () => {
      const { statements: s, logger } = await open(driver);
      const requests = Array.from({ length: SQLITE_MAX_GROUP + 1 }, () => request());
      const sent = await logger.during(() => expect(s.claimOrReadMany!(requests)).rejects.toThrow(RangeError));
      expect(sent).toEqual([]);
    });

    it('groups the calls of one tick (a local file runs its statements synchronously)', async () => {
      const { statements: s } = await open(driver);
      expect(s.groupMode).toBe('tick');
    });
  });
}

describe('SQLite group commit through the store', () => {
  for (const driver of ['better-sqlite3', 'libsql'] as const) {
    const synchronous = driver === 'better-sqlite3';
    groupCommitThroughTheStore({
      label: driver,
      async open() {
        const { db, logger, close } = await open(driver);
        let seen = 0;
        return {
          db,
          sent() {
            const since = logger.statements.slice(seen);
            seen = logger.statements.length;
            return synchronous ? commits(since) : since.length;
          },
          close,
        };
      },
      // better-sqlite3: one transaction for the claims of a tick (the first of them goes alone).
      // libsql, a local file: likewise by tick, as one read and one insert.
      counted: synchronous ? 'commits' : 'statements',
      alone: synchronous ? [1, 1] : [2, 1],
      most: synchronous ? 2 : 4,
    });
  }
});

describe('SQLite group commit while another process writes', () => {
  // better-sqlite3 only: it opens with busy_timeout = 0, so a locked file answers SQLITE_BUSY at
  // once and the store retries without blocking; libsql waits in its own busy handler.
  it('SQLITE_BUSY: claims and completions grouped while another process holds the write lock wait for it, then all succeed (better-sqlite3)', {
    timeout: 60_000,
  }, async () => {
    const { db, file } = await open('better-sqlite3');
    const store = createDrizzleStore(db);
    const requests = Array.from({ length: 16 }, () => request());
    const lock = await holdSqliteWriteLock(file);
    try {
      let settled = 0;
      const claims = Promise.all(requests.map((r) => store.claim(r).finally(() => settled++)));
      await new Promise((resolve) => setTimeout(resolve, 100));
      // The event loop ran (this line), and no claim got past the other process's lock.
      expect(settled).toBe(0);
      await lock.release();
      const results = await claims;
      expect(results.map((r) => r.outcome)).toEqual(requests.map(() => 'claimed'));
    } finally {
      lock.kill();
    }
    const again = await holdSqliteWriteLock(file);
    try {
      const done = Promise.all(
        requests.map((r, i) => store.complete({ scope: r.scope, key: r.key, token: r.token, outcome: outcome(i) })),
      );
      await again.release();
      expect(await done).toEqual(requests.map(() => true));
    } finally {
      again.kill();
    }
  });
});
