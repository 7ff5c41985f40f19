/**
 * The fleet's sweep lock: at most one process sweeps a pair of tables at a time (R3), whichever
 * started it (`startSweeper` in an app, `idem sweep` from cron). Taken without waiting: a round
 * that finds it held is skipped, never queued behind the other.
 *
 * - PostgreSQL: `pg_try_advisory_xact_lock` in a transaction that stays open for the round and
 *   writes nothing; the batches run on other connections of the pool and commit one by one. A
 *   transaction-level lock cannot outlive its connection's transaction, so a process that dies
 *   mid-round frees it with its connection. PGlite is one connection in one process: there the
 *   lock is this process's only.
 * - MySQL: `GET_LOCK(name, 0)`, held by the connection a transaction pins and released on the
 *   same connection (`RELEASE_LOCK`) before it ends; named after the database and the table, as
 *   MySQL's named locks are server-wide.
 * - SQLite and libsql: no advisory lock exists, and `BEGIN IMMEDIATE` around a round would stop
 *   every claim for its length. A lease row instead, in a small table beside the live one
 *   (`<keys>_sweep_lease`, created on first use), taken by one conditional upsert that succeeds
 *   only when the lease is free, expired or already ours, renewed before each batch, freed at the
 *   end; a process that dies mid-round holds it until its lease runs out.
 */
import { randomUUID } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { sqliteClock } from './database-clock.js';
import type { DetectedDatabase } from './dialect.js';
import { executedRows } from './dialect-rows.js';
import { openTransaction } from './owned-transaction.js';
import { retrySqliteBusy } from './sqlite/busy.js';
import type { TableNames } from './table-names.js';

/** What a round gets while it holds the lock: whether it still does (SQLite renews its lease here). */
export type StillHeld = () => Promise<boolean>;

/** Runs `work` if this process takes the lock now; `{ ran: false }` when another holds it. */
export type SweepLock = <T>(
  work: (stillHeld: StillHeld) => Promise<T>,
) => Promise<{ ran: true; value: T } | { ran: false }>;

/** How long a SQLite lease lasts unless renewed: far longer than one batch, short enough after a crash. */
export const SQLITE_LEASE_MS = 60_000;

const always: StillHeld = async () => true;

/** Locks held in this process, by database handle and table: the only lock there is on PGlite. */
const heldHere = new WeakMap<object, Set<string>>();

async function inProcess<T>(db: object, name: string, work: () => Promise<T>) {
  const held = heldHere.get(db) ?? new Set<string>();
  heldHere.set(db, held);
  if (held.has(name)) return { ran: false as const };
  held.add(name);
  try {
    return { ran: true as const, value: await work() };
  } finally {
    held.delete(name);
  }
}

export function sweepLock(detected: DetectedDatabase, tables: TableNames): SweepLock {
  const name = `idem:sweep:${tables.keys}`;
  if (detected.dialect === 'postgres') {
    const { db } = detected;
    if (detected.driver.name === 'pglite') return (work) => inProcess(db, name, () => work(always));
    return (work) =>
      openTransaction(db, async (tx) => {
        const [row] = await tx
          .select({
            got: sql<boolean>`pg_try_advisory_xact_lock(hashtextextended(${name} || ':' || current_schema(), 0))`,
          })
          .from(sql`(VALUES (1)) AS one (x)`);
        if (row?.got !== true) return { ran: false as const };
        return { ran: true as const, value: await work(always) };
      });
  }
  if (detected.dialect === 'mysql') {
    const { db } = detected;
    // MySQL refuses names over 64 characters: a digest of the database and table keeps it at 51.
    const lockName = sql`CONCAT('idem:sweep:', LEFT(SHA2(CONCAT(DATABASE(), '.', ${tables.keys}), 256), 40))`;
    return (work) =>
      openTransaction(db, async (tx) => {
        const [answer] = executedRows('mysql', await tx.execute(sql`SELECT GET_LOCK(${lockName}, 0) AS got`));
        if (Number(answer?.got) !== 1) return { ran: false as const };
        try {
          return { ran: true as const, value: await work(always) };
        } finally {
          await tx.execute(sql`SELECT RELEASE_LOCK(${lockName})`);
        }
      });
  }
  const { db } = detected;
  const lease = sql.identifier(`${tables.keys}_sweep_lease`);
  const now = sqliteClock.now;
  let created = false;
  const run = async (statement: ReturnType<typeof sql>) =>
    (await retrySqliteBusy(async () => await db.all<{ holder: string }>(statement))) as { holder: string }[];
  return async (work) => {
    if (!created) {
      await retrySqliteBusy(
        async () =>
          await db.run(
            sql`CREATE TABLE IF NOT EXISTS ${lease} (name text PRIMARY KEY NOT NULL, holder text NOT NULL, until integer NOT NULL)`,
          ),
      );
      created = true;
    }
    const holder = randomUUID();
    const take = () =>
      run(
        sql`INSERT INTO ${lease} (name, holder, until) VALUES ('sweep', ${holder}, ${now} + ${SQLITE_LEASE_MS})
            ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, until = excluded.until
            WHERE ${lease}.until <= ${now} OR ${lease}.holder = excluded.holder
            RETURNING holder`,
      );
    if ((await take()).length !== 1) return { ran: false };
    try {
      return { ran: true, value: await work(async () => (await take()).length === 1) };
    } finally {
      await run(sql`UPDATE ${lease} SET until = 0 WHERE name = 'sweep' AND holder = ${holder} RETURNING holder`);
    }
  };
}
