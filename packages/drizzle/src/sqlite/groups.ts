/**
 * Group commit on SQLite: the many forms of the fresh path's two statements. On better-sqlite3
 * a group is the one-request statements run in one synchronous `BEGIN IMMEDIATE` transaction;
 * on libsql, multi-row statements, each its own transaction. Which requests insert and which
 * row answers which request is `group-commit.ts`'s bookkeeping, shared with MySQL.
 */
import type { ClaimRequest } from '@idem/core/store';
import { sql } from 'drizzle-orm';
import { sqliteClock as clock } from '../database-clock.js';
import type { AsyncSQLiteDatabase, SqliteDatabase, SyncSQLiteDatabase } from '../dialect.js';
import { liveRowOfValues } from '../drizzle-seams.js';
import { answerCompletions, liveByKey, planClaims } from '../group-commit.js';
import { openTransaction } from '../owned-transaction.js';
import {
  boundTuples,
  claimParameters,
  claimPlaceholders as b,
  claimValues,
  completedState,
  completion,
  freshClaim,
  outcomeParameters,
  ownedClaim,
  thisKey,
} from '../row-writes.js';
import type { Completion, FirstStep, StoreStatements } from '../store-statements.js';
import { isSqliteBusy, whileBusy } from './busy.js';
import { liveReadOf as liveRead, liveSelectionOf } from './rows.js';
import type { SqliteTables } from './schema.js';

/**
 * The most requests one group statement takes. A claim binds 7 values per row, a completion 7:
 * far below the 32,766 bound parameters of the SQLite builds better-sqlite3 and libsql bundle.
 * The batcher's groups are smaller (`group-commit.ts`); a longer one is refused before anything
 * is written, and the batcher then sends its requests one at a time.
 */
export const SQLITE_MAX_GROUP = 2000;

/** `(VALUES (…), (…))` of a group's rows, each a list of bound values. */
export const valuesOf = (rows: unknown[][]) => sql`(VALUES ${boundTuples(rows)})`;

const assertGroupFits = (length: number) => {
  if (length > SQLITE_MAX_GROUP)
    throw new RangeError(`[idem] SQLite store: a group of ${length} requests; at most ${SQLITE_MAX_GROUP}`);
};

/** Whether a libsql drizzle instance wraps a client of a local file (`@libsql/client`'s `protocol`). */
function isLocalLibsql(db: AsyncSQLiteDatabase): boolean {
  return (db as { $client?: { protocol?: unknown } }).$client?.protocol === 'file';
}

/** What the group forms share with the one-request statements of `statements.ts`. */
export interface SqliteGroupContext {
  sqlite: SqliteDatabase;
  tables: SqliteTables;
  busyRetryMs: number;
  /** A read, retried while busy. */
  read<T>(run: () => T | Promise<T>): Promise<T>;
  /** A write, retried while busy and queued behind the process's other writes (libsql). */
  write<T>(run: () => T | Promise<T>): Promise<T>;
}

type Groups = Required<Pick<StoreStatements, 'claimOrReadMany' | 'completeMany' | 'groupMode'>>;

/**
 * better-sqlite3's group commit: the one-request statements, prepared once, run for each
 * request of the group inside one synchronous `BEGIN IMMEDIATE` transaction, so the group
 * costs one commit; each request sees the rows the ones before it wrote (a key twice in the
 * group: the later one reads the first one's claim, as it would one at a time). On a driver
 * that answers synchronously a prepared statement is cheaper than building and preparing one
 * multi-row statement per group (bench/README.md). A busy `BEGIN` did nothing and is retried;
 * once the body has begun, a failure rolls the whole group back and is not retried here.
 */
function synchronousGroups(on: SyncSQLiteDatabase, { tables, busyRetryMs }: SqliteGroupContext) {
  const { keys } = tables;
  const liveSelection = liveSelectionOf(keys);
  const readLiveOn = on.select(liveSelection).from(keys).where(thisKey(keys, b)).prepare();
  const insertClaimOn = on
    .insert(keys)
    .values({ scope: b.scope, key: b.key, generation: sql`1`, ...freshClaim(clock, b) })
    .onConflictDoNothing({ target: [keys.scope, keys.key] })
    .returning()
    .prepare();
  const completeOn = on
    .update(keys)
    .set(completion(clock, keys))
    .where(ownedClaim(keys, b))
    .returning({ token: keys.token })
    .prepare();
  const immediately = <T>(body: () => T): Promise<T> => {
    let started = false;
    return whileBusy(
      () =>
        openTransaction(
          on,
          () => {
            started = true;
            return body();
          },
          { behavior: 'immediate' },
        ),
      busyRetryMs,
      (error) => !started && isSqliteBusy(error),
    );
  };
  return {
    claimOrReadMany: async (requests: ClaimRequest[]) => {
      assertGroupFits(requests.length);
      return immediately(() =>
        requests.map((request): FirstStep | undefined => {
          const live = liveRead(readLiveOn.values({ scope: request.scope, key: request.key }));
          if (live) return { live };
          const [inserted] = insertClaimOn.values(claimParameters(request));
          return inserted && { inserted: liveRowOfValues(inserted) };
        }),
      );
    },
    completeMany: async (completions: Completion[]) => {
      assertGroupFits(completions.length);
      return immediately(() =>
        completions.map(
          ({ scope, key, token, outcome, resumable }) =>
            completeOn.all({ scope, key, token, ...outcomeParameters(outcome, resumable) }).length === 1,
        ),
      );
    },
  };
}

/**
 * libsql's group commit. Claims: one read of the live rows of the whole group (a WAL reader: no
 * lock, as `claimOrRead`'s read), then one multi-row `INSERT … ON CONFLICT DO NOTHING
 * RETURNING` of the misses. That insert is one statement, hence one transaction on its own:
 * all of the group's claims are written in one commit or none is, and a `SQLITE_BUSY` answer
 * means it did nothing, so it is retried as any write (the clock of that statement is each
 * row's `created_at`). Completions: one `UPDATE … FROM (VALUES …)`, each row guarded as
 * `complete` (`ownedClaim`: that owner's `processing` claim), one statement and so one commit;
 * `RETURNING` names the owners it completed, the others (a stale token, a claim taken over)
 * answer false.
 */
function asynchronousGroups(db: AsyncSQLiteDatabase, { tables, read, write }: SqliteGroupContext) {
  const { keys } = tables;
  const liveSelection = liveSelectionOf(keys);
  return {
    async claimOrReadMany(requests: ClaimRequest[]): Promise<Array<FirstStep | undefined>> {
      assertGroupFits(requests.length);
      const liveMany = db
        .select(liveSelection)
        .from(keys)
        .where(sql`(${keys.scope}, ${keys.key}) IN ${valuesOf(requests.map(({ scope, key }) => [scope, key]))}`);
      const reads = (await read(() => liveMany.values())).map((values) => liveRead([values]));
      const plan = planClaims(requests, liveByKey(reads.filter((live) => live !== undefined)));
      if (plan.misses.length === 0) return plan.answer(new Map());
      const insertMany = db
        .insert(keys)
        .values(
          plan.misses.map((request) => {
            const v = claimValues(request, '');
            return { scope: v.scope, key: v.key, generation: sql`1`, ...freshClaim(clock, v) };
          }),
        )
        .onConflictDoNothing({ target: [keys.scope, keys.key] })
        .returning();
      const written = (await write(() => insertMany.values())).map(liveRowOfValues);
      return plan.answer(liveByKey(written.map((row) => ({ row, now: row.createdAt }))));
    },
    async completeMany(completions: Completion[]): Promise<boolean[]> {
      assertGroupFits(completions.length);
      const v = (column: number) => sql.raw(`"v"."column${column}"`);
      const rows = completions.map(({ scope, key, token, outcome, resumable }) => [
        scope,
        key,
        token,
        outcome.kind,
        outcome.status,
        outcome.body,
        completedState({ resumable }),
      ]);
      const update = db
        .update(keys)
        .set(completion(clock, keys, { kind: v(4), status: v(5), body: v(6), state: v(7) }))
        .from(sql`${valuesOf(rows)} AS "v"`)
        .where(ownedClaim(keys, { scope: v(1), key: v(2), token: v(3) }))
        .returning({ scope: keys.scope, key: keys.key, token: keys.token });
      return answerCompletions(completions, await write(() => update.all()));
    },
  };
}

/**
 * The dialect's group forms and how a group forms. better-sqlite3 answers synchronously, so
 * nothing is ever in flight: a group is the calls of one tick. libsql on a local file runs each
 * statement synchronously too, behind a promise: grouped by tick as well (bench/README.md,
 * "Group commit"). Over the network (`libsql://`, `http(s)://`, `ws(s)://`) a statement is in
 * flight for a round trip: grouped by in-flight writes.
 */
export function sqliteGroups(context: SqliteGroupContext): Groups {
  const { sqlite } = context;
  if (sqlite.transactions === 'synchronous') return { ...synchronousGroups(sqlite.db, context), groupMode: 'tick' };
  return { ...asynchronousGroups(sqlite.db, context), groupMode: isLocalLibsql(sqlite.db) ? 'tick' : 'inFlight' };
}
