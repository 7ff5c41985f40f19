/**
 * The MySQL statements (mysql2), written to MySQL 8 semantics: no `RETURNING` (MariaDB 10.5+
 * has it, MySQL does not) and no data-modifying CTE. A write answers only its affected-rows
 * count, so a claim that wrote reads its row back by its own token, which no one else holds:
 * a row the read finds is the one this claim wrote. Rule 1 is a plain `INSERT`, and a
 * duplicate-key error (`ER_DUP_ENTRY`) says that the key exists: not `INSERT IGNORE`, which
 * would also turn a truncation into a warning, nor `ON DUPLICATE KEY UPDATE`, whose affected
 * rows depend on the connection's `CLIENT_FOUND_ROWS` flag (a group of claims, where one
 * existing key must not fail the statement, uses it as a no-op and reads its rows back instead
 * of counting them: `groups.ts`). The reuse of an expired key is a
 * short transaction that locks the live row (`SELECT … FOR UPDATE`). Atomic mode holds a named
 * lock (`GET_LOCK(name, 0)`) on the key while its transaction claims and runs the handler, so
 * that a duplicate is answered at once instead of waiting for the uncommitted row.
 */
import { createHash } from 'node:crypto';
import type { ClaimOwner, ClaimRequest, StoreTransaction } from '@idem/core/store';
import { and, eq, getTableColumns, getTableName, inArray, sql, type SQL } from 'drizzle-orm';
import { savepointsOn, transactionEndingAs } from '../atomic-transaction.js';
import { mysqlClock as clock } from '../database-clock.js';
import type { AnyMysqlDatabase } from '../dialect.js';
import { openTransaction, type TransactionOf } from '../owned-transaction.js';
import { toRecord, type LiveRow } from '../record-rows.js';
import { renewByLease, renewedLease } from '../renewals.js';
import { mysqlStepNames, saveStepByCompareAndSet } from '../steps.js';
import { sameGeneration, waitsAdded } from '../wait-counts.js';
import * as writes from '../row-writes.js';
import type { StoreStatements } from '../store-statements.js';
import { mysqlGroups } from './groups.js';
import { affectedRows, assertFits, executedRows, isDuplicateKey, primaryKeyIn } from './rows.js';
import { RECORD_STATES, type MysqlTables } from './schema.js';

const param = sql.placeholder;
const b = writes.claimPlaceholders;

/** The transaction drizzle hands a transaction's callback. */
type AnyMysqlTransaction = TransactionOf<AnyMysqlDatabase>;
const LIVE_STATES = RECORD_STATES.filter((state) => state !== 'archived');

/**
 * The sweeper's candidates: expired live rows, oldest expiry first, read through the
 * `(state, expires_at)` index (R3) — one range per state that is not `archived`.
 */
export function mysqlSweepCandidates(db: AnyMysqlDatabase, { keys }: MysqlTables, limit: number) {
  return db
    .select({ scope: keys.scope, key: keys.key })
    .from(keys)
    .where(and(inArray(keys.state, LIVE_STATES), writes.expiredAt(clock, keys)))
    .orderBy(keys.expiresAt)
    .limit(limit);
}

export function mysqlStatements(db: AnyMysqlDatabase, tables: MysqlTables): StoreStatements {
  const { keys, history } = tables;
  const stepNames = mysqlStepNames(keys.steps);
  const archivedBefore = (archivedAt: typeof keys.archivedAt | typeof history.archivedAt) =>
    sql`${archivedAt} < ${clock.before(sql`${param('olderThanMs')}`)}`;

  // Built on `db` and prepared, or on a transaction with bound values (atomic mode).
  const claimInsert = (on: AnyMysqlDatabase, b: writes.ClaimBindings) =>
    on.insert(keys).values({ scope: b.scope, key: b.key, generation: sql`1`, ...writes.freshClaim(clock, b) });
  const ownedRow = (on: AnyMysqlDatabase, b: writes.OwnerBindings) =>
    on
      .select()
      .from(keys)
      .where(and(writes.thisKey(keys, b), eq(keys.token, b.token)));
  const completeUpdate = (on: AnyMysqlDatabase, b: writes.OwnerBindings, outcome?: writes.OutcomeBindings) =>
    on
      .update(keys)
      .set(writes.completion(clock, keys, outcome))
      .where(writes.ownedClaim(keys, b));

  const insertClaim = claimInsert(db, b).prepare();
  const readOwned = ownedRow(db, b).prepare();

  const readLive = db
    .select({ ...getTableColumns(keys), now: sql`${clock.now}`.mapWith(keys.createdAt) })
    .from(keys)
    .where(writes.thisKey(keys, b))
    .prepare();

  const reclaimReleased = db
    .update(keys)
    .set(writes.freshClaim(clock, b))
    .where(writes.stillReleased(clock, keys, b))
    .prepare();

  const takeOverStale = db
    .update(keys)
    .set(writes.takeover(clock, b, keys))
    .where(writes.stillStale(clock, keys, b))
    .prepare();

  const resumeResumable = db
    .update(keys)
    .set(writes.resumption(clock, b, keys))
    .where(writes.stillResumable(clock, keys, b))
    .prepare();

  // E8: a step is a compare-and-set on the owner's steps (`steps.ts`), prepared or on a transaction.
  const readStepsOn = (on: AnyMysqlDatabase, b: writes.OwnerBindings) =>
    on.select({ steps: keys.steps }).from(keys).where(writes.ownedClaim(keys, b));
  const writeStepsOn = (on: AnyMysqlDatabase, b: writes.OwnerBindings, from: SQL, to: SQL) =>
    on
      .update(keys)
      .set({ steps: to })
      .where(and(writes.ownedClaim(keys, b), sql`${keys.steps} = ${from}`));
  const readSteps = readStepsOn(db, b).prepare();
  const writeSteps = writeStepsOn(db, b, sql`${param('from')}`, sql`${param('to')}`).prepare();

  const complete = completeUpdate(db, b).prepare();

  const release = db.update(keys).set({ state: sql`'released'` }).where(writes.ownedClaim(keys, b)).prepare();

  const renew = db
    .update(keys)
    .set(renewedLease(clock, sql`${param('leaseMs')}`))
    .where(writes.ownedClaim(keys, b))
    .prepare();

  const addWaits = db
    .update(keys)
    .set(waitsAdded(keys, sql`${param('count')}`))
    .where(sameGeneration(keys, { scope: b.scope, key: b.key, generation: sql`${param('generation')}` }))
    .prepare();

  const getLive = db.select().from(keys).where(writes.thisKey(keys, b)).prepare();

  const historyOf = db.select().from(history).where(writes.thisKey(history, b)).orderBy(history.generation).prepare();

  const archivedLive = db
    .select({ scope: keys.scope, key: keys.key })
    .from(keys)
    .where(and(sql`${keys.state} = 'archived'`, archivedBefore(keys.archivedAt)))
    .limit(param('limit'))
    .prepare();

  const archivedHistory = db
    .select({ scope: history.scope, key: history.key, generation: history.generation })
    .from(history)
    .where(archivedBefore(history.archivedAt))
    .limit(param('limit'))
    .prepare();

  const readLiveRow = async (scope: string, key: string) => {
    const [found] = await readLive.execute({ scope, key });
    if (!found) return undefined;
    const { now, ...row } = found;
    return { row, now };
  };

  /** A claim row this store just wrote, read back by its own token; undefined when it has already changed hands. */
  const readBack = async (request: Pick<ClaimRequest, 'scope' | 'key' | 'token'>): Promise<LiveRow | undefined> => {
    const [row] = await readOwned.execute({ scope: request.scope, key: request.key, token: request.token });
    return row;
  };

  /** Rule 1: the inserted row, or undefined when the key exists (the caller then reads it). */
  const insertClaimRow = async (request: ClaimRequest): Promise<LiveRow | undefined> => {
    assertFits(request);
    try {
      await insertClaim.execute(writes.claimParameters(request));
    } catch (error) {
      if (isDuplicateKey(error)) return undefined;
      throw error;
    }
    return readBack(request);
  };

  /**
   * Atomic mode's statements on the transaction `tx`, and the named lock its claim took. The
   * lock is MySQL's `GET_LOCK`, held by the connection (not the transaction), so the
   * transaction releases it before it commits or rolls back: its pool connection must not
   * carry it to the next user.
   */
  const within = (tx: AnyMysqlTransaction) => {
    let lock: string | undefined;
    const statements: StoreTransaction = {
      async insertClaim(request) {
        assertFits(request);
        // At most 64 characters (MySQL): a digest of the table, scope and key.
        const name = `idem:${createHash('sha256')
          .update(JSON.stringify([getTableName(keys), request.scope, request.key]))
          .digest('base64url')}`;
        const [answer] = executedRows(await tx.execute(sql`SELECT GET_LOCK(${name}, 0) AS got`));
        const got = Number(answer?.got);
        if (got !== 1) {
          if (got === 0) return { outcome: 'inProgress' };
          throw new Error(`[idem] MySQL GET_LOCK answered ${String(answer?.got)} for atomic mode's claim`);
        }
        lock = name;
        try {
          await claimInsert(tx, writes.claimValues(request, '')).execute();
        } catch (error) {
          // A duplicate key rolls back this statement only, not the transaction.
          if (isDuplicateKey(error)) return { outcome: 'exists' };
          throw error;
        }
        const [row] = await ownedRow(tx, writes.ownerValues(request));
        if (!row) throw new Error('[idem] the claim atomic mode inserted could not be read back');
        return { outcome: 'claimed', record: toRecord(row) };
      },
      async lockOwned(owner) {
        const owned = writes.ownedClaim(keys, writes.ownerValues(owner));
        const [row] = await tx.select().from(keys).where(owned).for('update');
        return row ? toRecord(row) : null;
      },
      async complete({ outcome, resumable, ...owner }) {
        return (
          affectedRows(
            await completeUpdate(tx, writes.ownerValues(owner), writes.outcomeValues(outcome, resumable)),
          ) === 1
        );
      },
      saveStep: ({ name, result, ...owner }) =>
        saveStepByCompareAndSet(
          { scope: owner.scope, key: owner.key, token: owner.token },
          { name, result },
          async (o) => (await readStepsOn(tx, writes.ownerValues(o)))[0]?.steps,
          async (o, from, to) =>
            affectedRows(await writeStepsOn(tx, writes.ownerValues(o), sql`${from}`, sql`${to}`)) === 1,
        ),
      ...savepointsOn(tx),
    };
    const releaseLock = async () => {
      if (lock === undefined) return;
      const name = lock;
      lock = undefined;
      await tx.execute(sql`SELECT RELEASE_LOCK(${name})`);
    };
    return { statements, releaseLock };
  };

  return {
    ...mysqlGroups(db, tables),
    transaction: (work) =>
      transactionEndingAs(
        (body: (tx: AnyMysqlTransaction) => Promise<void>) => openTransaction(db, body),
        async (tx) => {
          const { statements, releaseLock } = within(tx);
          // Released before the COMMIT: a duplicate arriving in between waits for the commit
          // (milliseconds, not the handler) and then finds the key.
          try {
            return await work(statements);
          } finally {
            await releaseLock();
          }
        },
      ),
    insertClaim: insertClaimRow,
    // Read first: a replay is this one SELECT. A new key adds the INSERT and the read of the
    // row it wrote (no RETURNING); the loop in the store settles an insert that lost a race.
    async claimOrRead(request) {
      const live = await readLiveRow(request.scope, request.key);
      if (live) return { live };
      const inserted = await insertClaimRow(request);
      return inserted && { inserted };
    },
    readLive: readLiveRow,
    async reclaimReleased(request, releasedToken) {
      assertFits(request);
      if (affectedRows(await reclaimReleased.execute(writes.claimParameters(request, releasedToken))) !== 1)
        return undefined;
      return readBack(request);
    },
    async takeOverStale(request, staleToken) {
      assertFits(request);
      if (affectedRows(await takeOverStale.execute(writes.claimParameters(request, staleToken))) !== 1)
        return undefined;
      return readBack(request);
    },
    async resumeResumable(request, resumableToken) {
      assertFits(request);
      if (affectedRows(await resumeResumable.execute(writes.claimParameters(request, resumableToken))) !== 1)
        return undefined;
      return readBack(request);
    },
    saveStep: ({ name, result, ...owner }) =>
      saveStepByCompareAndSet(
        { scope: owner.scope, key: owner.key, token: owner.token },
        { name, result },
        async (o) => (await readSteps.execute(o))[0]?.steps,
        async (o, from, to) => affectedRows(await writeSteps.execute({ ...o, from, to })) === 1,
      ),
    async reuseExpired(request, seen) {
      assertFits(request);
      const v = writes.claimValues(request, seen.token);
      return openTransaction(db, async (tx) => {
        const expired = writes.stillExpired(clock, keys, v, seen.generation);
        const [locked] = await tx.select({ token: keys.token }).from(keys).where(expired).for('update');
        if (!locked) return undefined;
        const copied = affectedRows(
          await tx.insert(history).select(
            tx
              .select(writes.historyCopy(getTableColumns(keys), clock, stepNames))
              .from(keys)
              .where(writes.thisKey(keys, v)),
          ),
        );
        const turned = affectedRows(
          await tx
            .update(keys)
            .set({ ...writes.freshClaim(clock, v), generation: sql`${keys.generation} + 1` })
            .where(and(writes.thisKey(keys, v), eq(keys.token, v.previousToken))),
        );
        if (copied !== 1 || turned !== 1)
          throw new Error('[idem] the locked row vanished during the reuse of an expired key');
        const [archived] = await tx
          .select()
          .from(history)
          .where(and(eq(history.scope, v.scope), eq(history.key, v.key), eq(history.generation, seen.generation)));
        const [record] = await ownedRow(tx, writes.ownerValues(request));
        if (!archived || !record) throw new Error('[idem] the reuse of an expired key did not read back what it wrote');
        return { record, archived };
      });
    },
    async complete({ scope, key, token, outcome, resumable }) {
      return (
        affectedRows(await complete.execute({ scope, key, token, ...writes.outcomeParameters(outcome, resumable) })) ===
        1
      );
    },
    async release({ scope, key, token }) {
      return affectedRows(await release.execute({ scope, key, token })) === 1;
    },
    async renew({ scope, key, token, leaseMs }) {
      return affectedRows(await renew.execute({ scope, key, token, leaseMs })) === 1;
    },
    // MySQL has no RETURNING: one UPDATE renews the group, and when it renewed fewer rows than it
    // names (a claim taken over or completed meanwhile, which is rare), each one is asked alone.
    renewMany: (renewals) =>
      renewByLease(renewals, async (leaseMs, owners) => {
        const renewed = affectedRows(
          await db
            .update(keys)
            .set(renewedLease(clock, sql`${leaseMs}`))
            .where(writes.ownedClaims(keys, owners, (rows) => sql`(${writes.boundTuples(rows)})`)),
        );
        if (renewed === owners.length) return owners;
        const alone = await Promise.all(
          owners.map(async (owner) => affectedRows(await renew.execute({ ...owner, leaseMs })) === 1 && owner),
        );
        return alone.filter((owner): owner is ClaimOwner => owner !== false);
      }),
    async addWaits({ scope, key, generation }, count) {
      return affectedRows(await addWaits.execute({ scope, key, generation, count })) === 1;
    },
    async getLive(scope, key) {
      const [row] = await getLive.execute({ scope, key });
      return row;
    },
    history: (scope, key) => historyOf.execute({ scope, key }),
    // Sweep and purge read their candidates, then write them by primary key with the condition
    // repeated: row locks only (no range or gap locks that would hold up new claims), nothing
    // waits on a row a concurrent sweeper took first, and no `LIMIT` on a write, which
    // statement-based replication refuses to trust.
    async sweep(limit) {
      const candidates = await mysqlSweepCandidates(db, tables, limit);
      if (candidates.length === 0) return 0;
      return affectedRows(
        await db
          .update(keys)
          .set(writes.archiving(clock, stepNames))
          .where(
            and(
              primaryKeyIn(
                [sql`${keys.scope}`, sql`${keys.key}`],
                candidates.map((row) => [row.scope, row.key]),
              ),
              inArray(keys.state, LIVE_STATES),
              writes.expiredAt(clock, keys),
            ),
          ),
      );
    },
    async purgeLive(olderThanMs, limit) {
      const candidates = await archivedLive.execute({ olderThanMs, limit });
      if (candidates.length === 0) return 0;
      return affectedRows(
        await db.delete(keys).where(
          and(
            primaryKeyIn(
              [sql`${keys.scope}`, sql`${keys.key}`],
              candidates.map((row) => [row.scope, row.key]),
            ),
            sql`${keys.state} = 'archived'`,
            sql`${keys.archivedAt} < ${clock.before(sql`${olderThanMs}`)}`,
          ),
        ),
      );
    },
    async purgeHistory(olderThanMs, limit) {
      const candidates = await archivedHistory.execute({ olderThanMs, limit });
      if (candidates.length === 0) return 0;
      return affectedRows(
        await db.delete(history).where(
          and(
            primaryKeyIn(
              [sql`${history.scope}`, sql`${history.key}`, sql`${history.generation}`],
              candidates.map((row) => [row.scope, row.key, row.generation]),
            ),
            sql`${history.archivedAt} < ${clock.before(sql`${olderThanMs}`)}`,
          ),
        ),
      );
    },
    async ping() {
      await db.execute(sql`SELECT 1`);
    },
  };
}
