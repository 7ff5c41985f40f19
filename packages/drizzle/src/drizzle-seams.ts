/**
 * The only place where the store relies on drizzle beyond its documented query builder,
 * `prepare()` and `execute()`. Each seam is pinned, for every supported drizzle version, by
 * test/drizzle-seams.test.ts; a drizzle release that moves one fails that test, not a user.
 *
 * 1. **Which driver a drizzle instance wraps** (and so its dialect): the `entityKind` names of
 *    its classes, the names drizzle's own `is()` compares. Reading names needs no import of a
 *    driver or dialect module (a PostgreSQL app has no better-sqlite3 installed) and survives
 *    drizzle's class layout changing between versions (`PgDatabase` in 0.44–0.45,
 *    `PgAsyncDatabase` in 1.0).
 * 2. **SQLite's hot read by position**: the replay path reads the live row as an array
 *    (`values()`, public) and maps it by the selection's column order, which is the order of the
 *    selection object's keys (the fresh claim's `INSERT … RETURNING *` is taken the same way).
 *    This is the store's one positional decoding, kept because a benchmark shows it matters:
 *    drizzle's generic row mapping costs more than the statement itself there (bench/README.md,
 *    the floor's "hot read" line).
 * 3. **Which errors are drizzle's query errors**: `DrizzleQueryError` (drizzle-orm/errors, 0.44
 *    and later) wraps a failed statement's driver error and prints its parameters. drizzle-orm
 *    0.41–0.43 have no such class: they reject with the driver's own error, which does not list
 *    the parameters. The class is looked up in the module namespace, so that the import still
 *    links (in Node and in bundlers) where the export is missing.
 * 4. **A session bound to one connection** (`boundToConnection`): a drizzle database runs its
 *    statements through `db.session`, whose `client` is the driver's pool or connection, and
 *    whose `transaction(body, config)` checks a connection out only when `client` is a pool
 *    (node-postgres: `instanceof Pool` or a class named `…Pool`; mysql2: `'getConnection' in
 *    client`). A copy of the session whose `client` is one checked-out connection therefore runs
 *    drizzle's own transaction (`BEGIN`, the body, `COMMIT` or `ROLLBACK`, savepoints) on that
 *    connection and never releases it: the caller owns its lifetime (`owned-transaction.ts`).
 */
import { entityKind } from 'drizzle-orm';
import * as drizzleErrors from 'drizzle-orm/errors';
import type { LiveRow } from './record-rows.js';

/**
 * The `entityKind` names of `value`'s class and its ancestors, most derived first, e.g.
 * `['NodePgDatabase', 'PgDatabase']`; empty for anything that is not a drizzle object.
 */
export function entityKinds(value: unknown): string[] {
  const kinds: string[] = [];
  if (typeof value !== 'object' || value === null) return kinds;
  for (
    let type = Object.getPrototypeOf(value)?.constructor;
    typeof type === 'function' && type !== Object;
    type = Object.getPrototypeOf(type)
  ) {
    const kind: unknown = Object.hasOwn(type, entityKind) ? Reflect.get(type, entityKind) : undefined;
    if (typeof kind === 'string') kinds.push(kind);
  }
  return kinds;
}

/** The columns of SQLite's hot read, in the order `liveRowOfValues` takes them. */
export const LIVE_READ_ORDER = [
  'scope',
  'key',
  'generation',
  'fingerprint',
  'state',
  'token',
  'createdAt',
  'leaseUntil',
  'expiresAt',
  'completedAt',
  'archivedAt',
  'takeovers',
  'outcomeKind',
  'outcomeStatus',
  'body',
  'waits',
  'onFailure',
  'attempts',
  'steps',
  'now',
] as const;

/**
 * Throws unless `selection` (the object given to `select()`) has the keys of
 * {@link LIVE_READ_ORDER} in that order: the statement's columns come out in that order.
 */
export function assertLiveReadOrder(selection: object): void {
  if (Object.keys(selection).join() !== LIVE_READ_ORDER.join())
    throw new Error('[idem] the SQLite live table changed: update LIVE_READ_ORDER and liveRowOfValues');
}

/**
 * A live row from the values of one row of the hot read (SQLite keeps timestamps as integer
 * epoch milliseconds). better-sqlite3 answers an array, libsql an array-like `Row`.
 */
export function liveRowOfValues(v: ArrayLike<unknown>): LiveRow {
  return {
    scope: v[0] as string,
    key: v[1] as string,
    generation: Number(v[2]),
    fingerprint: v[3] as string | null,
    state: v[4] as LiveRow['state'],
    token: v[5] as string,
    createdAt: new Date(Number(v[6])),
    leaseUntil: new Date(Number(v[7])),
    expiresAt: new Date(Number(v[8])),
    completedAt: v[9] === null ? null : new Date(Number(v[9])),
    archivedAt: v[10] === null ? null : new Date(Number(v[10])),
    takeovers: Number(v[11]),
    outcomeKind: v[12] as LiveRow['outcomeKind'],
    outcomeStatus: v[13] === null ? null : Number(v[13]),
    body: v[14] as string | null,
    waits: Number(v[15]),
    onFailure: v[16] as LiveRow['onFailure'],
    attempts: Number(v[17]),
    steps: v[18] as string,
  };
}

/** The database clock of the hot read: its last column. */
export function nowOfValues(v: ArrayLike<unknown>): Date {
  return new Date(Number(v[19]));
}

/**
 * drizzle's `DrizzleQueryError`, or undefined on drizzle-orm 0.41–0.43, which have none. Read
 * with `Reflect.get`: bundlers (webpack, Turbopack) fail a build on `namespace.Missing` the way
 * Node fails a named import.
 */
const DrizzleQueryErrorClass = Reflect.get(drizzleErrors, 'DrizzleQueryError') as
  | typeof drizzleErrors.DrizzleQueryError
  | undefined;

/** Whether `error` is drizzle's wrapper of a failed statement (whose message lists the parameters). */
export function isDrizzleQueryError(error: unknown): error is drizzleErrors.DrizzleQueryError {
  return DrizzleQueryErrorClass !== undefined && error instanceof DrizzleQueryErrorClass;
}

/** What the store reads of a drizzle database's session: its client, and its transaction. */
export interface DrizzleSession {
  client: unknown;
  transaction(body: (tx: never) => unknown, config?: unknown): Promise<unknown>;
}

/** `db.session`, drizzle's session of a PostgreSQL or MySQL database, when it has the shape the store relies on. */
export function sessionOf(db: object): DrizzleSession | undefined {
  const session: unknown = Reflect.get(db, 'session');
  if (typeof session !== 'object' || session === null) return undefined;
  if (!('client' in session) || typeof Reflect.get(session, 'transaction') !== 'function') return undefined;
  return session as DrizzleSession;
}

/**
 * A copy of `session` that runs every statement, and drizzle's whole transaction, on
 * `connection`: drizzle's `transaction()` sees a client that is not a pool, so it runs `BEGIN`
 * on the session itself and releases nothing.
 */
export function boundToConnection<S extends DrizzleSession>(session: S, connection: unknown): S {
  return Object.create(session, {
    client: { value: connection, writable: true, enumerable: true, configurable: true },
  }) as S;
}
