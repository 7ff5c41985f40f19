/**
 * Group commit on PostgreSQL: the fresh path's two statements, each ONE statement (one round
 * trip, one commit) for a whole group, on every PostgreSQL driver (node-postgres, postgres-js,
 * PGlite), as named prepared statements like the single ones.
 *
 * - `claimOrReadMany`: a data-modifying CTE, `INSERT … SELECT … FROM unnest(…) ON CONFLICT
 *   (scope, key) DO NOTHING RETURNING *`, and in the same statement the read of the rows the
 *   inserts conflicted with (`UNION ALL`, as `claimOrRead`), each row tagged with its request's
 *   index in the group.
 * - `completeMany`: `UPDATE … SET … FROM unnest(…) WHERE` (the owner matches, as `ownedClaim`)
 *   `RETURNING` the index.
 *
 * The group travels as one array parameter per column (`unnest($1::integer[], $2::text[], …)`),
 * so that each statement has ONE text whatever the group's size: built by drizzle's builder
 * once, parsed and planned by PostgreSQL once per connection (issue 34: building a `VALUES` list
 * afresh for every group was 6% of the server's CPU, and PostgreSQL parsed each). drizzle maps
 * the claims' rows as it maps the single statement's, on every supported drizzle-orm (1.0 maps
 * driver values by codecs, not by the column). The clocks are the single statements'
 * (`postgresClock` for claims, `postgresStatementClock` for completions).
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
import { completion, completedState, freshClaim, onFailureOf, ownedClaim } from '../row-writes.js';
import type { FirstStep, StoreStatements } from '../store-statements.js';

export function pgGroupStatements(
  db: AnyPgDatabase,
  { keys }: PgTables,
  name: (statement: string) => string,
): Required<Pick<StoreStatements, 'claimOrReadMany' | 'completeMany' | 'groupMode'>> {
  const columns = getTableColumns(keys);
  const entries = Object.entries(columns) as Array<[keyof LiveRow, Column]>;
  const id = sql.identifier;
  const list = (items: SQL[]) => sql.join(items, sql`, `);
  /** A column of the request list `idem_v`. */
  const v = (name: string) => sql`idem_v.${id(name)}`;
  const column = (alias: string, c: Column) => sql`${id(alias)}.${id(c.name)}`;
  /** One array parameter: a column of the group, one element per request. */
  const array = (parameter: string, type: string) => sql`${sql.placeholder(parameter)}::${sql.raw(type)}[]`;

  // The insert's values, as `claimInsert` writes them, from the request list, in the table's column order.
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

  // The claims: the requests as one array per column, unnested (`i` is the request's index).
  const requests = sql`unnest(${array('i', 'integer')}, ${array('scope', 'text')}, ${array('key', 'text')}, ${array('fingerprint', 'text')}, ${array('token', 'text')}, ${array('leaseMs', 'double precision')}, ${array('retentionMs', 'double precision')}, ${array('onFailure', 'text')})`;
  const claimed = db.$with('idem_claimed').as(
    db
      .insert(keys)
      .select(
        sql`SELECT ${insertValues} FROM ${requests} AS idem_v (i, scope, key, fingerprint, token, lease_ms, retention_ms, on_failure) ORDER BY idem_v.scope, idem_v.key`,
      )
      .onConflictDoNothing({ target: [keys.scope, keys.key] })
      .returning(),
  );
  // Per request: its own inserted row (c), else the live row of its key (k) as the snapshot shows it.
  const pick = (c: Column) =>
    sql`CASE WHEN c.${id(columns.token.name)} IS NOT NULL THEN ${column('c', c)} ELSE ${column('k', c)} END AS ${id(c.name)}`;
  const claimMany = db
    .with(claimed)
    .select({
      i: sql<number>`r.idem_i`.mapWith(Number),
      inserted: sql<boolean>`r.idem_inserted`,
      ...columnsReadFrom(columns, (c) => sql`r.${id(c.name)}`),
      now: sql`r.idem_now`.mapWith(keys.createdAt),
    })
    .from(
      sql`(SELECT idem_r.i AS idem_i, c.${id(columns.token.name)} IS NOT NULL AS idem_inserted, ${list(entries.map(([, c]) => pick(c)))}, ${postgresClock.now} AS idem_now
           FROM unnest(${array('i', 'integer')}, ${array('scope', 'text')}, ${array('key', 'text')}, ${array('token', 'text')}) AS idem_r (i, scope, key, token)
           LEFT JOIN ${claimed} AS c ON ${matches('c', true)}
           LEFT JOIN ${keys} AS k ON c.${id(columns.token.name)} IS NULL AND ${matches('k', false)}
           WHERE c.${id(columns.token.name)} IS NOT NULL OR k.${id(columns.token.name)} IS NOT NULL) AS r`,
    )
    .prepare(name('claim_or_read_many'));

  // The completions: `UPDATE … FROM unnest(…)`, the owner matching as `ownedClaim`.
  const completions = sql`unnest(${array('i', 'integer')}, ${array('scope', 'text')}, ${array('key', 'text')}, ${array('token', 'text')}, ${array('kind', 'text')}, ${array('status', 'integer')}, ${array('body', 'text')}, ${array('state', 'text')}) AS idem_v (i, scope, key, token, kind, status, body, state)`;
  const completeMany = db
    .update(keys)
    .set(
      completion(postgresStatementClock, keys, {
        kind: v('kind'),
        status: v('status'),
        body: v('body'),
        state: v('state'),
      }),
    )
    .from(completions)
    .where(ownedClaim(keys, { scope: v('scope'), key: v('key'), token: v('token') }))
    .returning({ i: sql<number>`idem_v.i`.mapWith(Number) })
    .prepare(name('complete_many'));

  return {
    groupMode: 'inFlight',
    async claimOrReadMany(group) {
      const results: Array<FirstStep | undefined> = group.map(() => undefined);
      const insertedKeys = new Set<string>();
      const rows = await claimMany.execute({
        i: group.map((_, i) => i),
        scope: group.map((r) => r.scope),
        key: group.map((r) => r.key),
        fingerprint: group.map((r) => r.fingerprint),
        token: group.map((r) => r.token),
        leaseMs: group.map((r) => r.leaseMs),
        retentionMs: group.map((r) => r.retentionMs),
        onFailure: group.map(onFailureOf),
      });
      for (const { i, inserted: isInsert, now, ...row } of rows) {
        // Two requests of one key with one token (never from the engine) get one insert, answered once.
        const request = group[i] as ClaimRequest;
        const which = JSON.stringify([request.scope, request.key]);
        if (isInsert && insertedKeys.has(which)) continue;
        if (isInsert) insertedKeys.add(which);
        results[i] = isInsert ? { inserted: row } : { live: { row, now } };
      }
      return results;
    },
    async completeMany(args) {
      const done = args.map(() => false);
      const rows = await completeMany.execute({
        i: args.map((_, i) => i),
        scope: args.map((a) => a.scope),
        key: args.map((a) => a.key),
        token: args.map((a) => a.token),
        kind: args.map((a) => a.outcome.kind),
        status: args.map((a) => a.outcome.status),
        body: args.map((a) => a.outcome.body),
        state: args.map(completedState),
      });
      for (const { i } of rows) done[i] = true;
      return done;
    },
  };
}
