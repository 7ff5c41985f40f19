/**
 * The PostgreSQL statements. The hot path (claim, complete, release) is named prepared
 * statements, each one atomic statement; the reuse of an expired key is a short transaction
 * that locks the live row (`SELECT … FOR UPDATE`) and re-checks it, so that of two concurrent
 * reusers exactly one writes the next generation and the history row. Atomic mode runs the same
 * claim and writes.completion statements, unprepared, on the transaction's own connection. Under
 * concurrency the store groups claims and completions into one statement each (`groups.ts`).
 */
import type { ClaimRequest, StoreTransaction } from '@idem/core/store';
import { and, eq, getTableColumns, getTableName, sql, type Placeholder, type SQL } from 'drizzle-orm';
import { savepointsOn, transactionEndingAs } from '../atomic-transaction.js';
import { postgresClock as clock, postgresStatementClock } from '../database-clock.js';
import type { AnyPgDatabase } from '../dialect.js';
import { openTransaction, type TransactionOf } from '../owned-transaction.js';
import { pgGroupStatements } from './groups.js';
import type { PgTables } from './schema.js';
import { renewByLease, renewedLease } from '../renewals.js';
import { pgStepNames, saveStepByCompareAndSet } from '../steps.js';
import { sameGeneration, waitsAdded } from '../wait-counts.js';
import { columnsReadFrom, toRecord } from '../record-rows.js';
import * as writes from '../row-writes.js';
import type { StoreStatements } from '../store-statements.js';

const param = sql.placeholder;

/** The transaction drizzle hands a transaction's callback. */
type AnyPgTransaction = TransactionOf<AnyPgDatabase>;

/**
 * The sweeper's candidates: expired live rows, read through the partial expiry index (R3).
 * `SKIP LOCKED` lets several sweepers (one per app instance) share the work without waiting.
 */
export function pgSweepCandidates(db: AnyPgDatabase, { keys }: PgTables, limit: number | Placeholder) {
  const expired = writes.expiredLive(clock, keys);
  return db
    .select(writes.primaryKeyOf(keys))
    .from(keys)
    .where(expired)
    .orderBy(keys.expiresAt)
    .limit(limit)
    .for('update', { skipLocked: true });
}

export function pgStatements(db: AnyPgDatabase, tables: PgTables): StoreStatements {
  const { keys, history } = tables;
  const stepNames = pgStepNames(keys.steps);
  // A statement name stands for one text on each connection: the table names keep two stores apart.
  const name = (statement: string) => `idem:${statement}:${getTableName(keys)}:${getTableName(history)}`;
  const archivedBefore = (archivedAt: SQL | typeof keys.archivedAt) =>
    sql`${archivedAt} < ${clock.before(sql`${param('olderThanMs')}`)}`;
  const b = writes.claimPlaceholders;
  const withClock = { ...getTableColumns(keys), now: sql`${clock.now}`.mapWith(keys.createdAt) };

  // Built on `db` and prepared for the hot path, or on a transaction with bound values (atomic mode).
  const claimInsert = (on: AnyPgDatabase, b: writes.ClaimBindings) =>
    on
      .insert(keys)
      .values({ scope: b.scope, key: b.key, generation: sql`1`, ...writes.freshClaim(clock, b) })
      .onConflictDoNothing({ target: [keys.scope, keys.key] })
      .returning();
  const completeUpdate = (on: AnyPgDatabase, b: writes.OwnerBindings, outcome: writes.OutcomeBindings) =>
    on
      .update(keys)
      .set(writes.completion(postgresStatementClock, keys, outcome))
      .where(writes.ownedClaim(keys, b))
      .returning({ token: keys.token });

  const insertClaim = claimInsert(db, b).prepare(name('claim'));

  // The replay path in one round trip: the insert that conflicts, and the row it conflicted
  // with. PostgreSQL wants the data-modifying WITH at the top, so the UNION sits in FROM.
  const claimed = db.$with('claimed').as(claimInsert(db, b));
  const claimOrRead = db
    .with(claimed)
    .select({
      inserted: sql<boolean>`r.inserted`,
      ...columnsReadFrom(getTableColumns(keys), (column) => sql`r.${sql.identifier(column.name)}`),
      now: sql`r.now`.mapWith(keys.createdAt),
    })
    .from(
      sql`(SELECT true AS inserted, ${claimed}.*, ${clock.now} AS now FROM ${claimed}
           UNION ALL
           SELECT false, ${keys}.*, ${clock.now} FROM ${keys} WHERE ${writes.thisKey(keys, b)} AND NOT EXISTS (SELECT 1 FROM ${claimed})) AS r`,
    )
    .prepare(name('claim_or_read'));

  const readLive = db.select(withClock).from(keys).where(writes.thisKey(keys, b)).prepare(name('read'));

  const reclaimReleased = db
    .update(keys)
    .set(writes.freshClaim(clock, b))
    .where(writes.stillReleased(clock, keys, b))
    .returning()
    .prepare(name('reclaim'));

  const takeOverStale = db
    .update(keys)
    .set(writes.takeover(clock, b, keys))
    .where(writes.stillStale(clock, keys, b))
    .returning()
    .prepare(name('takeover'));

  const resumeResumable = db
    .update(keys)
    .set(writes.resumption(clock, b, keys))
    .where(writes.stillResumable(clock, keys, b))
    .returning()
    .prepare(name('resume'));

  // E8: a step is a compare-and-set on the owner's steps (`steps.ts`), prepared or on a transaction.
  const readStepsOn = (on: AnyPgDatabase, b: writes.OwnerBindings) =>
    on.select({ steps: keys.steps }).from(keys).where(writes.ownedClaim(keys, b));
  const writeStepsOn = (on: AnyPgDatabase, b: writes.OwnerBindings, from: SQL, to: SQL) =>
    on
      .update(keys)
      .set({ steps: to })
      .where(and(writes.ownedClaim(keys, b), sql`${keys.steps} = ${from}`))
      .returning({ token: keys.token });
  const readSteps = readStepsOn(db, b).prepare(name('read_steps'));
  const writeSteps = writeStepsOn(db, b, sql`${param('from')}`, sql`${param('to')}`).prepare(name('write_steps'));

  const complete = completeUpdate(db, b, writes.outcomePlaceholders).prepare(name('complete'));

  const release = db
    .update(keys)
    .set({ state: sql`'released'` })
    .where(writes.ownedClaim(keys, b))
    .returning({ token: keys.token })
    .prepare(name('release'));

  const renew = db
    .update(keys)
    .set(renewedLease(clock, sql`${param('leaseMs')}`))
    .where(writes.ownedClaim(keys, b))
    .returning({ token: keys.token })
    .prepare(name('renew'));

  const addWaits = db
    .update(keys)
    .set(waitsAdded(keys, sql`${param('count')}`))
    .where(sameGeneration(keys, { scope: b.scope, key: b.key, generation: sql`${param('generation')}` }))
    .returning({ token: keys.token })
    .prepare(name('add_waits'));

  const getLive = db.select().from(keys).where(writes.thisKey(keys, b)).prepare(name('get'));

  const historyOf = db
    .select()
    .from(history)
    .where(writes.thisKey(history, b))
    .orderBy(history.generation)
    .prepare(name('history'));

  const sweep = db
    .update(keys)
    .set(writes.archiving(clock, stepNames))
    .where(sql`(${keys.scope}, ${keys.key}) IN ${pgSweepCandidates(db, tables, param('limit'))}`)
    .returning({ token: keys.token })
    .prepare(name('sweep'));

  // Purge's candidates, locked with SKIP LOCKED so that two purges share the work without waiting.
  const skipLocked = { skipLocked: true } as const;
  const purgeableLive = db
    .select(writes.primaryKeyOf(keys))
    .from(keys)
    .where(and(sql`${keys.state} = 'archived'`, archivedBefore(keys.archivedAt)))
    .limit(param('limit'))
    .for('update', skipLocked);
  const purgeableHistory = db
    .select({ scope: history.scope, key: history.key, generation: history.generation })
    .from(history)
    .where(archivedBefore(sql`${history.archivedAt}`))
    .limit(param('limit'))
    .for('update', skipLocked);
  const purgeLive = db
    .delete(keys)
    .where(sql`(${keys.scope}, ${keys.key}) IN ${purgeableLive}`)
    .returning({ token: keys.token })
    .prepare(name('purge_live'));
  const purgeHistory = db
    .delete(history)
    .where(sql`(${history.scope}, ${history.key}, ${history.generation}) IN ${purgeableHistory}`)
    .returning({ token: history.token })
    .prepare(name('purge_history'));

  /**
   * Atomic mode's claim: rule 1 behind a transaction-level advisory try-lock on the key, in one
   * statement. The first transaction's row stays uncommitted while its handler runs, and any
   * other `INSERT … ON CONFLICT` of that key would wait for it, holding a pool connection all the
   * while; a duplicate finds the lock taken instead and answers at once. The lock is released by
   * the commit or rollback. Its 64-bit key hashes the table name, scope and key.
   */
  const lockedClaimInsert = (tx: AnyPgDatabase, request: ClaimRequest) => {
    const b = writes.claimValues(request, '');
    const lockKey = JSON.stringify([getTableName(keys), request.scope, request.key]);
    const lock = tx
      .$with('idem_lock')
      .as(
        tx
          .select({ got: sql<boolean>`pg_try_advisory_xact_lock(hashtextextended(${lockKey}, 0))`.as('got') })
          .from(sql`(VALUES (1)) AS one (x)`),
      );
    // The values of `claimInsert`, in the table's column order, as an INSERT … SELECT … WHERE got
    // (as SQL: drizzle's types of an insert-select want aliased fields; the statement is the same).
    const values = tx
      .select({ scope: b.scope, key: b.key, generation: sql`1`, ...writes.freshClaim(clock, b) })
      .from(lock)
      .where(sql`${lock.got}`);
    const inserted = tx.$with('idem_inserted').as(
      tx
        .insert(keys)
        .select(values.getSQL())
        .onConflictDoNothing({ target: [keys.scope, keys.key] })
        .returning(),
    );
    return tx
      .with(lock, inserted)
      .select({
        got: lock.got,
        inserted: sql<boolean>`${inserted}.${sql.identifier(keys.scope.name)} IS NOT NULL`,
        ...columnsReadFrom(getTableColumns(keys), (column) => sql`${inserted}.${sql.identifier(column.name)}`),
      })
      .from(lock)
      .leftJoin(inserted, sql`true`);
  };

  /** Atomic mode's statements on the transaction `tx`. */
  const within = (tx: AnyPgTransaction): StoreTransaction => ({
    async insertClaim(request) {
      const [found] = await lockedClaimInsert(tx, request);
      if (!found?.got) return { outcome: 'inProgress' };
      const { got: _got, inserted, ...row } = found;
      return inserted ? { outcome: 'claimed', record: toRecord(row) } : { outcome: 'exists' };
    },
    async lockOwned(owner) {
      const owned = writes.ownedClaim(keys, writes.ownerValues(owner));
      const [row] = await tx.select().from(keys).where(owned).for('update');
      return row ? toRecord(row) : null;
    },
    async complete({ outcome, resumable, ...owner }) {
      return (
        (await completeUpdate(tx, writes.ownerValues(owner), writes.outcomeValues(outcome, resumable))).length === 1
      );
    },
    saveStep: ({ name, result, ...owner }) =>
      saveStepByCompareAndSet(
        { scope: owner.scope, key: owner.key, token: owner.token },
        { name, result },
        async (o) => (await readStepsOn(tx, writes.ownerValues(o)))[0]?.steps,
        async (o, from, to) => (await writeStepsOn(tx, writes.ownerValues(o), sql`${from}`, sql`${to}`)).length === 1,
      ),
    ...savepointsOn(tx),
  });

  return {
    ...pgGroupStatements(db, tables, name),
    transaction: (work) =>
      transactionEndingAs(
        (body: (tx: AnyPgTransaction) => Promise<void>) => openTransaction(db, body),
        (tx) => work(within(tx)),
      ),
    async insertClaim(request) {
      const [row] = await insertClaim.execute(writes.claimParameters(request));
      return row;
    },
    async claimOrRead(request) {
      const [found] = await claimOrRead.execute(writes.claimParameters(request));
      if (!found) return undefined;
      const { inserted, now, ...row } = found;
      return inserted ? { inserted: row } : { live: { row, now } };
    },
    async readLive(scope, key) {
      const [found] = await readLive.execute({ scope, key });
      if (!found) return undefined;
      const { now, ...row } = found;
      return { row, now };
    },
    async reclaimReleased(request, releasedToken) {
      const [row] = await reclaimReleased.execute(writes.claimParameters(request, releasedToken));
      return row;
    },
    async takeOverStale(request, staleToken) {
      const [row] = await takeOverStale.execute(writes.claimParameters(request, staleToken));
      return row;
    },
    async resumeResumable(request, resumableToken) {
      const [row] = await resumeResumable.execute(writes.claimParameters(request, resumableToken));
      return row;
    },
    saveStep: ({ name, result, ...owner }) =>
      saveStepByCompareAndSet(
        { scope: owner.scope, key: owner.key, token: owner.token },
        { name, result },
        async (o) => (await readSteps.execute(o))[0]?.steps,
        async (o, from, to) => (await writeSteps.execute({ ...o, from, to })).length === 1,
      ),
    async reuseExpired(request, seen) {
      const v = writes.claimValues(request, seen.token);
      return openTransaction(db, async (tx) => {
        const expired = writes.stillExpired(clock, keys, v, seen.generation);
        const [locked] = await tx.select({ token: keys.token }).from(keys).where(expired).for('update');
        if (!locked) return undefined;
        const [archived] = await tx
          .insert(history)
          .select(
            tx
              .select(writes.historyCopy(getTableColumns(keys), clock, stepNames))
              .from(keys)
              .where(writes.thisKey(keys, v)),
          )
          .returning();
        const [record] = await tx
          .update(keys)
          .set({ ...writes.freshClaim(clock, v), generation: sql`${keys.generation} + 1` })
          .where(and(writes.thisKey(keys, v), eq(keys.token, v.previousToken)))
          .returning();
        if (!archived || !record) throw new Error('[idem] the locked row vanished during the reuse of an expired key');
        return { record, archived };
      });
    },
    async complete({ scope, key, token, outcome, resumable }) {
      return (
        (await complete.execute({ scope, key, token, ...writes.outcomeParameters(outcome, resumable) })).length === 1
      );
    },
    async release({ scope, key, token }) {
      return (await release.execute({ scope, key, token })).length === 1;
    },
    async renew({ scope, key, token, leaseMs }) {
      return (await renew.execute({ scope, key, token, leaseMs })).length === 1;
    },
    renewMany: (renewals) =>
      renewByLease(renewals, (leaseMs, owners) =>
        db
          .update(keys)
          .set(renewedLease(clock, sql`${leaseMs}`))
          .where(writes.ownedClaims(keys, owners, (rows) => sql`(VALUES ${writes.boundTuples(rows)})`))
          .returning({ scope: keys.scope, key: keys.key, token: keys.token }),
      ),
    async addWaits({ scope, key, generation }, count) {
      return (await addWaits.execute({ scope, key, generation, count })).length === 1;
    },
    async getLive(scope, key) {
      const [row] = await getLive.execute({ scope, key });
      return row;
    },
    history: (scope, key) => historyOf.execute({ scope, key }),
    async sweep(limit) {
      return (await sweep.execute({ limit })).length;
    },
    async purgeLive(olderThanMs, limit) {
      return (await purgeLive.execute({ olderThanMs, limit })).length;
    },
    async purgeHistory(olderThanMs, limit) {
      return (await purgeHistory.execute({ olderThanMs, limit })).length;
    },
    async ping() {
      await db.execute(sql`SELECT 1`);
    },
  };
}
