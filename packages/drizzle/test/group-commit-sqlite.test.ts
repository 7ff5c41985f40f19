/**
 * Group commit on SQLite (better-sqlite3, libsql): the group statements themselves
 * (`claimOrReadMany`, `completeMany`), counted through drizzle's logger, and what they write,
 * compared with the one-request statements.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ClaimRequest } from '@idem/core/store';
import type { Logger } from 'drizzle-orm';
import { afterEach, describe, expect, it } from 'vitest';
import { createDrizzleStore, migrate, type DrizzleDatabase } from '../src/index.ts';
import { detectDialect } from '../src/dialect.ts';
import { defineSqliteTables } from '../src/sqlite-schema.ts';
import { SQLITE_MAX_GROUP, sqliteStatements } from '../src/sqlite-store.ts';
import type { FirstStep, StoreStatements } from '../src/store-statements.ts';
import { resolveTableNames } from '../src/table-names.ts';
import { holdSqliteWriteLock } from './sqlite-lock.ts';
import { CONCURRENT, groupCommitThroughTheStore } from './group-commit-behaviour.ts';

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

const request = (key: string = randomUUID(), token: string = randomUUID()): ClaimRequest => ({
  scope: 'group',
  key,
  fingerprint: `fp-${key}`,
  token,
  leaseMs: 60_000,
  retentionMs: 3_600_000,
  expiredReuse: 'execute',
});
const outcome = (i: number) => ({ kind: 'success' as const, status: 200 + (i % 3), body: `{"i":${i}}` });

function inserted(step: FirstStep | undefined) {
  if (!step || !('inserted' in step)) throw new Error(`expected an inserted row, got ${JSON.stringify(step)}`);
  return step.inserted;
}
function live(step: FirstStep | undefined) {
  if (!step || !('live' in step)) throw new Error(`expected a live row, got ${JSON.stringify(step)}`);
  return step.live;
}
/** A row without the columns the database clock writes. */
const timeless = ({ createdAt, leaseUntil, expiresAt, completedAt, ...row }: Record<string, unknown>) => row;

for (const driver of ['better-sqlite3', 'libsql'] as const) {
  describe(`SQLite group commit (${driver})`, () => {
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

    it('E1: a group writes the same rows as one request at a time', async () => {
      const grouped = await open(driver);
      const alone = await open(driver);
      const requests = Array.from({ length: 16 }, () => request());
      const groupSteps = await grouped.statements.claimOrReadMany!(requests);
      const aloneSteps = await Promise.all(requests.map((r) => alone.statements.claimOrRead(r)));
      expect(groupSteps.map((step) => timeless(inserted(step)))).toEqual(
        aloneSteps.map((step) => timeless(inserted(step))),
      );
      for (const step of groupSteps) {
        const row = inserted(step);
        expect(row.leaseUntil.getTime() - row.createdAt.getTime()).toBe(60_000);
        expect(row.expiresAt.getTime() - row.createdAt.getTime()).toBe(3_600_000);
      }
      const completions = requests.map((r, i) => ({ scope: r.scope, key: r.key, token: r.token, outcome: outcome(i) }));
      expect(await grouped.statements.completeMany!(completions)).toEqual(completions.map(() => true));
      expect(await Promise.all(completions.map((c) => alone.statements.complete(c)))).toEqual(
        completions.map(() => true),
      );
      for (const r of requests) {
        const [a, b] = await Promise.all([
          grouped.statements.getLive(r.scope, r.key),
          alone.statements.getLive(r.scope, r.key),
        ]);
        expect(timeless(a!)).toEqual(timeless(b!));
        // R1: retention counts from completion, in the group as alone.
        expect(a!.expiresAt.getTime() - a!.completedAt!.getTime()).toBe(3_600_000);
      }
    });

    it('E1: a key twice in one group has exactly one winner; the other sees its live row', async () => {
      const { statements: s } = await open(driver);
      const key = randomUUID();
      const first = request(key);
      const second = request(key);
      const other = request();
      const [a, b, c] = await s.claimOrReadMany!([first, second, other]);
      expect(inserted(a).token).toBe(first.token);
      expect(live(b).row.token).toBe(first.token);
      expect(live(b).row.state).toBe('processing');
      expect(live(b).now.getTime()).toBeGreaterThanOrEqual(inserted(a).createdAt.getTime());
      expect(inserted(c).token).toBe(other.token);
    });

    it('E2: keys already in the table come back as their live rows, with the clock', async () => {
      const { statements: s } = await open(driver);
      const old = request();
      inserted(await s.claimOrRead(old));
      const fresh = request();
      const [a, b] = await s.claimOrReadMany!([request(old.key), fresh]);
      expect(live(a).row.token).toBe(old.token);
      expect(live(a).now).toBeInstanceOf(Date);
      expect(inserted(b).token).toBe(fresh.token);
    });

    it('E6: a stale token inside a group of completions answers false; the others complete', async () => {
      const { statements: s } = await open(driver);
      const requests = Array.from({ length: 8 }, () => request());
      await s.claimOrReadMany!(requests);
      const completions = requests.map((r, i) => ({
        scope: r.scope,
        key: r.key,
        token: i === 3 ? randomUUID() : r.token,
        outcome: outcome(i),
      }));
      expect(await s.completeMany!(completions)).toEqual(completions.map((_, i) => i !== 3));
      expect((await s.getLive('group', requests[3]!.key))?.state).toBe('processing');
      expect((await s.getLive('group', requests[4]!.key))?.state).toBe('completed');
      // The same completion twice in one group: the first completes, the second finds it done.
      const again = request();
      await s.claimOrRead(again);
      const twice = { scope: again.scope, key: again.key, token: again.token, outcome: outcome(1) };
      expect(await s.completeMany!([twice, twice])).toEqual([true, false]);
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
