/**
 * Group commit on PostgreSQL: the many forms of the fresh path's two statements, each ONE
 * statement (one round trip, one commit) for a whole group, on every PostgreSQL driver
 * (node-postgres, postgres-js, PGlite) through drizzle's `db.execute`.
 *
 * - `claimOrReadMany`: a data-modifying CTE, `INSERT … SELECT … FROM (VALUES …) ON CONFLICT
 *   (scope, key) DO NOTHING RETURNING *`, and in the same statement the read of the rows the
 *   inserts conflicted with (`UNION ALL`, as `claimOrRead`), each row tagged with its request's
 *   index in the group.
 * - `completeMany`: `UPDATE … SET … FROM (VALUES …) WHERE` (the owner matches, as `ownedClaim`)
 *   `RETURNING` the index.
 *
 * Every value is bound and cast to its column's type in the VALUES list. The claims' statement is
 * built with drizzle's query builder (a `$with` of the insert, a select over a subquery, as
 * `claimOrRead`), so that drizzle maps its rows as it maps the single statement's, on every
 * supported drizzle-orm (1.0 maps driver values by codecs, not by the column). The clocks are the
 * single statements' (`postgresClock` for claims, `postgresStatementClock` for completions).
 * A statement's read sees the snapshot taken when it started: a key inserted twice in one group
 * is inserted once (`DO NOTHING`), and the duplicate finds no row it can read, so it comes back
 * undefined and the store's loop reads again, after the commit. The claims are inserted in key
 * order: two groups holding the same keys (two processes, retries) that inserted them in their
 * arrival orders could each wait for the other's uncommitted row, a deadlock PostgreSQL breaks only
 * after `deadlock_timeout` by failing one of them.
 */
import type { ClaimRequest } from '@idem/core/store';
import { getTableColumns, sql, type Column, type SQL } from 'drizzle-orm';
import { postgresClock, postgresStatementClock } from '../database-clock.js';
import type { AnyPgDatabase } from '../dialect.js';
import type { PgTables } from './schema.js';
import { columnsReadFrom, type LiveRow } from '../record-rows.js';
import { completedState, completion, freshClaim, onFailureOf, ownedClaim } from '../row-writes.js';
import type { Completion, FirstStep, StoreStatements } from '../store-statements.js';
import { pgExecutedRows } from './rows.js';

export function pgGroupStatements(
  db: AnyPgDatabase,
  { keys }: PgTables,
): Required<Pick<StoreStatements, 'claimOrReadMany' | 'completeMany' | 'groupMode'>> {
  const columns = getTableColumns(keys);
  const entries = Object.entries(columns) as Array<[keyof LiveRow, Column]>;
  const id = sql.identifier;
  const list = (items: SQL[]) => sql.join(items, sql`, `);
  /** A column of the VALUES list `idem_v`. */
  const v = (name: string) => sql`idem_v.${id(name)}`;
  const column = (alias: string, c: Column) => sql`${id(alias)}.${id(c.name)}`;

  // The insert's values, as `claimInsert` writes them, from the VALUES list, in the table's column order.
  const inserted: Record<keyof LiveRow, SQL> = {
    scope: v('scope'),
    key: v('key'),
    generation: sql`1`,
    ...freshClaim(postgresClock, {
      scope: v('scope'),
      key: v('key'),
      fingerprint: v('fingerprint'),
      token: v('token'),
      leaseMs: v('lease_ms'),
      retentionMs: v('retention_ms'),
      previousToken: sql`''`,
      onFailure: v('on_failure'),
    }),
  };
  const insertValues = list(entries.map(([field]) => inserted[field]));
  /** The request `idem_r` matches the row `alias` (its key; with `token`, its own claim). */
  const matches = (alias: string, token: boolean) =>
    sql`${column(alias, columns.scope)} = idem_r.scope AND ${column(alias, columns.key)} = idem_r.key${token ? sql` AND ${column(alias, columns.token)} = idem_r.token` : sql``}`;

  function claimQuery(requests: ClaimRequest[]) {
    const rows = requests.map(
      (r, i) =>
        sql`(${i}::integer, ${r.scope}::text, ${r.key}::text, ${r.fingerprint}::text, ${r.token}::text, ${r.leaseMs}::double precision, ${r.retentionMs}::double precision, ${onFailureOf(r)}::text)`,
    );
    const requested = requests.map((r, i) => sql`(${i}::integer, ${r.scope}::text, ${r.key}::text, ${r.token}::text)`);
    const claimed = db.$with('idem_claimed').as(
      db
        .insert(keys)
        .select(
          sql`SELECT ${insertValues} FROM (VALUES ${list(rows)}) AS idem_v (i, scope, key, fingerprint, token, lease_ms, retention_ms, on_failure) ORDER BY idem_v.scope, idem_v.key`,
        )
        .onConflictDoNothing({ target: [keys.scope, keys.key] })
        .returning(),
    );
    // Per request: its own inserted row (c), else the live row of its key (k) as the snapshot shows it.
    const pick = (c: Column) =>
      sql`CASE WHEN c.${id(columns.token.name)} IS NOT NULL THEN ${column('c', c)} ELSE ${column('k', c)} END AS ${id(c.name)}`;
    return db
      .with(claimed)
      .select({
        i: sql<number>`r.idem_i`.mapWith(Number),
        inserted: sql<boolean>`r.idem_inserted`,
        ...columnsReadFrom(columns, (c) => sql`r.${id(c.name)}`),
        now: sql`r.idem_now`.mapWith(keys.createdAt),
      })
      .from(
        sql`(SELECT idem_r.i AS idem_i, c.${id(columns.token.name)} IS NOT NULL AS idem_inserted, ${list(entries.map(([, c]) => pick(c)))}, ${postgresClock.now} AS idem_now
             FROM (VALUES ${list(requested)}) AS idem_r (i, scope, key, token)
             LEFT JOIN ${claimed} AS c ON ${matches('c', true)}
             LEFT JOIN ${keys} AS k ON c.${id(columns.token.name)} IS NULL AND ${matches('k', false)}
             WHERE c.${id(columns.token.name)} IS NOT NULL OR k.${id(columns.token.name)} IS NOT NULL) AS r`,
      );
  }

  function completeStatement(args: Completion[]): SQL {
    const rows = args.map(
      (a, i) =>
        sql`(${i}::integer, ${a.scope}::text, ${a.key}::text, ${a.token}::text, ${a.outcome.kind}::text, ${a.outcome.status}::integer, ${a.outcome.body}::text, ${completedState(a)}::text)`,
    );
    const set = completion(postgresStatementClock, keys, {
      kind: v('kind'),
      status: v('status'),
      body: v('body'),
      state: v('state'),
    });
    const assignments = list(
      Object.entries(set).map(([field, value]) => sql`${id(columns[field as keyof LiveRow].name)} = ${value}`),
    );
    const owned = ownedClaim(keys, { scope: v('scope'), key: v('key'), token: v('token') });
    return sql`UPDATE ${keys} SET ${assignments}
FROM (VALUES ${list(rows)}) AS idem_v (i, scope, key, token, kind, status, body, state)
WHERE ${owned}
RETURNING idem_v.i AS idem_i`;
  }

  return {
    groupMode: 'inFlight',
    async claimOrReadMany(requests) {
      const results: Array<FirstStep | undefined> = requests.map(() => undefined);
      const insertedKeys = new Set<string>();
      for (const { i, inserted: isInsert, now, ...row } of await claimQuery(requests)) {
        // Two requests of one key with one token (never from the engine) get one insert, answered once.
        const request = requests[i] as ClaimRequest;
        const which = JSON.stringify([request.scope, request.key]);
        if (isInsert && insertedKeys.has(which)) continue;
        if (isInsert) insertedKeys.add(which);
        results[i] = isInsert ? { inserted: row } : { live: { row, now } };
      }
      return results;
    },
    async completeMany(args) {
      const done = args.map(() => false);
      for (const found of pgExecutedRows(await db.execute(completeStatement(args)))) done[Number(found.idem_i)] = true;
      return done;
    },
  };
}
