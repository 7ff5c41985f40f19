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
 * Every value is bound and cast to its column's type in the VALUES list. The clocks are the
 * single statements' (`postgresClock` for claims, `postgresStatementClock` for completions).
 * A statement's read sees the snapshot taken when it started: a key inserted twice in one group
 * is inserted once (`DO NOTHING`), and the duplicate finds no row it can read, so it comes back
 * undefined and the store's loop reads again, after the commit.
 */
import type { ClaimOwner, ClaimRequest, StoredOutcome } from '@idem/core/store';
import { getTableColumns, sql, type Column, type SQL } from 'drizzle-orm';
import { postgresClock, postgresStatementClock } from './database-clock.js';
import type { AnyPgDatabase } from './dialect.js';
import type { PgTables } from './pg-schema.js';
import type { LiveRow } from './record-rows.js';
import { completion, freshClaim, ownedClaim } from './row-writes.js';
import type { FirstStep, StoreStatements } from './store-statements.js';

type Row = Record<string, unknown>;

/** The rows of `db.execute`, whichever driver answered (node-postgres and PGlite: `{ rows }`; postgres-js: an array). */
function rowsOf(result: unknown): Row[] {
  if (Array.isArray(result)) return result as Row[];
  return ((result as { rows?: Row[] }).rows ?? []) as Row[];
}

/** A driver value as the column maps it (drizzle's query builder does the same). */
function fromDriver(column: Column, value: unknown): unknown {
  return value === null || value === undefined ? null : column.mapFromDriverValue(value);
}

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

  // The insert's columns and values, as `claimInsert` writes them, from the VALUES list.
  const inserted: Partial<Record<keyof LiveRow, SQL>> = {
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
    }),
  };
  const insertColumns = list(Object.keys(inserted).map((field) => sql`${id(columns[field as keyof LiveRow].name)}`));
  const insertValues = list(Object.values(inserted) as SQL[]);
  const readFrom = (alias: string) => list(entries.map(([, column]) => sql`${id(alias)}.${id(column.name)}`));
  const sameRequest = (alias: string) =>
    sql`${id(alias)}.${id(columns.scope.name)} = idem_v.scope AND ${id(alias)}.${id(columns.key.name)} = idem_v.key`;

  function claimStatement(requests: ClaimRequest[]): SQL {
    const rows = requests.map(
      (r, i) =>
        sql`(${i}::integer, ${r.scope}::text, ${r.key}::text, ${r.fingerprint}::text, ${r.token}::text, ${r.leaseMs}::double precision, ${r.retentionMs}::double precision)`,
    );
    return sql`WITH idem_v (i, scope, key, fingerprint, token, lease_ms, retention_ms) AS (VALUES ${list(rows)}),
idem_claimed AS (
  INSERT INTO ${keys} (${insertColumns}) SELECT ${insertValues} FROM idem_v
  ON CONFLICT (${id(columns.scope.name)}, ${id(columns.key.name)}) DO NOTHING
  RETURNING *
)
SELECT idem_v.i AS idem_i, true AS idem_inserted, ${readFrom('c')}, ${postgresClock.now} AS idem_now
  FROM idem_v JOIN idem_claimed AS c ON ${sameRequest('c')} AND c.${id(columns.token.name)} = idem_v.token
UNION ALL
SELECT idem_v.i, false, ${readFrom('k')}, ${postgresClock.now}
  FROM idem_v JOIN ${keys} AS k ON ${sameRequest('k')}
  WHERE NOT EXISTS (SELECT 1 FROM idem_claimed AS c WHERE ${sameRequest('c')} AND c.${id(columns.token.name)} = idem_v.token)`;
  }

  function completeStatement(args: Array<ClaimOwner & { outcome: StoredOutcome }>): SQL {
    const rows = args.map(
      (a, i) =>
        sql`(${i}::integer, ${a.scope}::text, ${a.key}::text, ${a.token}::text, ${a.outcome.kind}::text, ${a.outcome.status}::integer, ${a.outcome.body}::text)`,
    );
    const set = completion(postgresStatementClock, keys, { kind: v('kind'), status: v('status'), body: v('body') });
    const assignments = list(
      Object.entries(set).map(([field, value]) => sql`${id(columns[field as keyof LiveRow].name)} = ${value}`),
    );
    const owned = ownedClaim(keys, { scope: v('scope'), key: v('key'), token: v('token') });
    return sql`UPDATE ${keys} SET ${assignments}
FROM (VALUES ${list(rows)}) AS idem_v (i, scope, key, token, kind, status, body)
WHERE ${owned}
RETURNING idem_v.i AS idem_i`;
  }

  return {
    groupMode: 'inFlight',
    async claimOrReadMany(requests) {
      const results: Array<FirstStep | undefined> = requests.map(() => undefined);
      const insertedKeys = new Set<string>();
      for (const found of rowsOf(await db.execute(claimStatement(requests)))) {
        const i = Number(found.idem_i);
        const isInsert = found.idem_inserted === true || found.idem_inserted === 't';
        // Two requests of one key with one token (never from the engine) get one insert, answered once.
        const request = requests[i] as ClaimRequest;
        const which = JSON.stringify([request.scope, request.key]);
        if (isInsert && insertedKeys.has(which)) continue;
        if (isInsert) insertedKeys.add(which);
        const row = Object.fromEntries(
          entries.map(([field, column]) => [field, fromDriver(column, found[column.name])]),
        ) as LiveRow;
        const now = fromDriver(columns.createdAt, found.idem_now) as Date;
        results[i] = isInsert ? { inserted: row } : { live: { row, now } };
      }
      return results;
    },
    async completeMany(args) {
      const done = args.map(() => false);
      for (const found of rowsOf(await db.execute(completeStatement(args)))) done[Number(found.idem_i)] = true;
      return done;
    },
  };
}
