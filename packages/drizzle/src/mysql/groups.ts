/**
 * Group commit on MySQL: the many forms of the fresh path's two statements, each one
 * transaction for a whole group. Which requests insert and which row answers which request is
 * `group-commit.ts`'s bookkeeping, shared with SQLite; each write is guarded as its one-request
 * form (`row-writes.ts`).
 */
import type { ClaimRequest } from '@idem/core/store';
import { getTableColumns, sql } from 'drizzle-orm';
import { mysqlClock as clock } from '../database-clock.js';
import type { AnyMysqlDatabase } from '../dialect.js';
import { answerCompletions, liveByKey, ownerKeyOf, planClaims } from '../group-commit.js';
import { openTransaction, type TransactionOf } from '../owned-transaction.js';
import type { LiveRead } from '../record-rows.js';
import {
  boundTuples,
  claimValues,
  completedState,
  completion,
  freshClaim,
  ownedClaim,
  ownedClaims,
} from '../row-writes.js';
import type { Completion, FirstStep, StoreStatements } from '../store-statements.js';
import { affectedRows, byBytes, fits, primaryKeyIn, retryingDeadlocks } from './rows.js';
import type { MysqlTables } from './schema.js';

/**
 * The most requests one group statement takes: a claim binds 9 values per row, a completion 7,
 * far below the 65,535 placeholders of MySQL's protocol. The batcher's groups are smaller
 * (`group-commit.ts`); a longer one is refused before anything is written, and the batcher then
 * sends its requests one at a time.
 */
export const MYSQL_MAX_GROUP = 2000;

const assertGroupFits = (length: number) => {
  if (length > MYSQL_MAX_GROUP)
    throw new RangeError(`[idem] MySQL store: a group of ${length} requests; at most ${MYSQL_MAX_GROUP}`);
};

export function mysqlGroups(
  db: AnyMysqlDatabase,
  { keys }: MysqlTables,
): Required<Pick<StoreStatements, 'claimOrReadMany' | 'completeMany' | 'groupMode'>> {
  const liveSelection = { ...getTableColumns(keys), now: sql`${clock.now}`.mapWith(keys.createdAt) };
  /** The live rows of a group's keys with the clock. */
  const readLiveMany = async (
    on: AnyMysqlDatabase | TransactionOf<AnyMysqlDatabase>,
    requests: readonly ClaimRequest[],
  ): Promise<LiveRead[]> => {
    if (requests.length === 0) return [];
    const rows = await on
      .select(liveSelection)
      .from(keys)
      .where(
        primaryKeyIn(
          [sql`${keys.scope}`, sql`${keys.key}`],
          requests.map((r) => [r.scope, r.key]),
        ),
      );
    return rows.map(({ now, ...row }) => ({ row, now }));
  };

  /**
   * Group commit's first step. One read of the live rows (no lock, as `claimOrRead`'s); then, for
   * the misses, one transaction: a multi-row `INSERT … ON DUPLICATE KEY UPDATE scope = scope`
   * (a no-op on a key that exists meanwhile, whichever `CLIENT_FOUND_ROWS` says; unlike `INSERT
   * IGNORE`, a value too long for its column stays an error), and one read of those keys. The
   * read is the transaction's first consistent read, so under REPEATABLE READ as under READ
   * COMMITTED it sees every row the insert collided with (the insert waited for its lock, so it
   * is committed). In one transaction, a failed group wrote nothing: no claim is left behind
   * without its answer. Rows go in primary-key order, so two groups lock shared keys in one
   * order; a deadlock victim rolled back whole and is run again. A request whose scope, key or
   * token does not fit its column is left to the one-request path (undefined: the store reads
   * again and then inserts it alone), which refuses it alone.
   */
  async function claimOrReadMany(requests: ClaimRequest[]): Promise<Array<FirstStep | undefined>> {
    assertGroupFits(requests.length);
    const plan = planClaims(requests, liveByKey(await readLiveMany(db, requests.filter(fits))), fits);
    if (plan.misses.length === 0) return plan.answer(new Map());
    const rows = plan.misses.sort((a, b) => byBytes(a.scope, b.scope) || byBytes(a.key, b.key));
    const written = await retryingDeadlocks(() =>
      openTransaction(db, async (tx) => {
        await tx
          .insert(keys)
          .values(
            rows.map((request) => {
              const v = claimValues(request, '');
              return { scope: v.scope, key: v.key, generation: sql`1`, ...freshClaim(clock, v) };
            }),
          )
          .onDuplicateKeyUpdate({ set: { scope: sql`${keys.scope}` } });
        return readLiveMany(tx, rows);
      }),
    );
    return plan.answer(liveByKey(written));
  }

  /**
   * Group commit's completions, in one transaction: a locking read (`FOR UPDATE`) of the group's
   * rows still owned as `complete` asks (`ownedClaims`: each token's `processing` claim), then one
   * `UPDATE … JOIN (SELECT … UNION ALL …)` of exactly those rows, joined as `complete` guards its
   * row (`ownedClaim`). The lock keeps every row the read found owned until the commit, so the
   * rows it found are the rows completed: MySQL answers a multi-table update with one
   * affected-rows count, not which rows. Locked in primary-key order (the read's range scan); a
   * deadlock victim rolled back whole and is run again.
   */
  async function completeMany(completions: Completion[]): Promise<boolean[]> {
    assertGroupFits(completions.length);
    const locked = await retryingDeadlocks(() =>
      openTransaction(db, async (tx) => {
        const owned = await tx
          .select({ scope: keys.scope, key: keys.key, token: keys.token })
          .from(keys)
          .where(ownedClaims(keys, completions, (rows) => sql`(${boundTuples(rows)})`))
          .for('update');
        const mine = new Set(owned.map(ownerKeyOf));
        // One row per owner: a completion twice in the group completes once (the first).
        const once = [
          ...new Map(
            completions.filter((c) => mine.has(ownerKeyOf(c))).map((c) => [ownerKeyOf(c), c] as const),
          ).values(),
        ];
        if (once.length === 0) return owned;
        const source = sql.join(
          once.map(({ scope, key, token, outcome, resumable }, i) =>
            i === 0
              ? sql`SELECT ${scope} AS ${sql.identifier('scope')}, ${key} AS ${sql.identifier('key')}, ${token} AS ${sql.identifier('token')}, ${outcome.kind} AS ${sql.identifier('kind')}, ${outcome.status} AS ${sql.identifier('status')}, ${outcome.body} AS ${sql.identifier('body')}, ${completedState({ resumable })} AS ${sql.identifier('state')}`
              : sql`SELECT ${scope}, ${key}, ${token}, ${outcome.kind}, ${outcome.status}, ${outcome.body}, ${completedState({ resumable })}`,
          ),
          sql` UNION ALL `,
        );
        const v = (name: string) => sql`${sql.identifier('v')}.${sql.identifier(name)}`;
        const assignments = completion(clock, keys, {
          kind: v('kind'),
          status: v('status'),
          body: v('body'),
          state: v('state'),
        });
        const columns = getTableColumns(keys);
        const set = sql.join(
          Object.entries(assignments).map(
            ([name, value]) => sql`${columns[name as keyof typeof assignments]} = ${value}`,
          ),
          sql`, `,
        );
        const guard = ownedClaim(keys, { scope: v('scope'), key: v('key'), token: v('token') });
        const updated = affectedRows(
          await tx.execute(sql`UPDATE ${keys} JOIN (${source}) AS ${sql.identifier('v')} ON ${guard} SET ${set}`),
        );
        if (updated !== once.length)
          throw new Error(`[idem] MySQL store: ${once.length} locked claims, but ${updated} were completed`);
        return owned;
      }),
    );
    return answerCompletions(completions, locked);
  }

  return { claimOrReadMany, completeMany, groupMode: 'inFlight' };
}
