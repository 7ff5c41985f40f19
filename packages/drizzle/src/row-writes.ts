/**
 * The column assignments every dialect writes, as drizzle `SET` lists and selections, and the
 * guards of its writes, as drizzle `where` conditions: each rule of `decideClaim` is a
 * compare-and-set on the row the store read, written here once. Values are SQL so that the same
 * list serves a prepared statement (placeholders) and a one-off statement inside a transaction
 * (bound values).
 */
import { and, eq, or, sql, type Column, type SQL, type SQLWrapper } from 'drizzle-orm';
import type { ClaimOwner, ClaimRequest, OnFailure, StoredOutcome } from '@idem/core/store';
import type { DatabaseClock } from './database-clock.js';

/** The inputs of a claim statement, each as SQL. */
export interface ClaimBindings {
  scope: SQL;
  key: SQL;
  fingerprint: SQL;
  token: SQL;
  leaseMs: SQL;
  retentionMs: SQL;
  /** The owner the compare-and-set expects to replace. */
  previousToken: SQL;
  /** E8: the mode a new claim stores (`'replay'` when the request has none). */
  onFailure: SQL;
}

const placeholder = (name: string) => sql`${sql.placeholder(name)}`;

/** Bindings for prepared statements; fill them with {@link claimParameters}. */
export const claimPlaceholders: ClaimBindings = {
  scope: placeholder('scope'),
  key: placeholder('key'),
  fingerprint: placeholder('fingerprint'),
  token: placeholder('token'),
  leaseMs: placeholder('leaseMs'),
  retentionMs: placeholder('retentionMs'),
  previousToken: placeholder('previousToken'),
  onFailure: placeholder('onFailure'),
};

/** E8: the mode a new claim of `request` stores: its own, `'replay'` when absent. */
export function onFailureOf(request: Pick<ClaimRequest, 'onFailure'>): OnFailure {
  return request.onFailure === 'resume' ? 'resume' : 'replay';
}

export function claimParameters(request: ClaimRequest, previousToken = '') {
  const { scope, key, fingerprint, token, leaseMs, retentionMs } = request;
  return { scope, key, fingerprint, token, leaseMs, retentionMs, previousToken, onFailure: onFailureOf(request) };
}

/** Bindings carrying the values themselves, for statements that are not prepared. */
export function claimValues(request: ClaimRequest, previousToken: string): ClaimBindings {
  const values = claimParameters(request, previousToken);
  return {
    scope: sql`${values.scope}`,
    key: sql`${values.key}`,
    fingerprint: sql`${values.fingerprint}`,
    token: sql`${values.token}`,
    leaseMs: sql`${values.leaseMs}`,
    retentionMs: sql`${values.retentionMs}`,
    previousToken: sql`${values.previousToken}`,
    onFailure: sql`${values.onFailure}`,
  };
}

/** The bindings that name a record and its owner: what `complete` and atomic mode match on. */
export type OwnerBindings = Pick<ClaimBindings, 'scope' | 'key' | 'token'>;

/** {@link OwnerBindings} carrying the values themselves. */
export function ownerValues({ scope, key, token }: { scope: string; key: string; token: string }): OwnerBindings {
  return { scope: sql`${scope}`, key: sql`${key}`, token: sql`${token}` };
}

/**
 * A `processing` claim owned by the request, with lease and retention from now (rules 1–3): the
 * request's mode, its first execution, no recovery point yet (E8).
 */
export function freshClaim(clock: DatabaseClock, b: ClaimBindings) {
  return {
    fingerprint: b.fingerprint,
    state: sql`'processing'`,
    token: b.token,
    createdAt: clock.now,
    leaseUntil: clock.after(b.leaseMs),
    expiresAt: clock.after(b.retentionMs),
    completedAt: sql`NULL`,
    archivedAt: sql`NULL`,
    takeovers: sql`0`,
    outcomeKind: sql`NULL`,
    outcomeStatus: sql`NULL`,
    body: sql`NULL`,
    waits: sql`0`,
    onFailure: b.onFailure,
    attempts: sql`1`,
    steps: sql`'[]'`,
  };
}

/** Rule 4: a new owner and lease for a stale claim, one more execution (E8); everything else (steps included) is kept. */
export function takeover(
  clock: DatabaseClock,
  b: ClaimBindings,
  columns: { takeovers: SQLWrapper; attempts: SQLWrapper },
) {
  return {
    token: b.token,
    leaseUntil: clock.after(b.leaseMs),
    takeovers: sql`${columns.takeovers} + 1`,
    attempts: sql`${columns.attempts} + 1`,
  };
}

/**
 * E8, the resume rule: a `resumable` record runs again in the same generation: a new owner and
 * lease, `processing`, one more execution, the failed attempt's outcome dropped; steps, waits,
 * fingerprint, mode and timestamps kept.
 */
export function resumption(clock: DatabaseClock, b: ClaimBindings, columns: { attempts: SQLWrapper }) {
  return {
    state: sql`'processing'`,
    token: b.token,
    leaseUntil: clock.after(b.leaseMs),
    attempts: sql`${columns.attempts} + 1`,
    outcomeKind: sql`NULL`,
    outcomeStatus: sql`NULL`,
    body: sql`NULL`,
  };
}

/** The outcome bindings of `complete`: the outcome, and the state it leaves (`completed`, or `resumable`: E8). */
export interface OutcomeBindings {
  kind: SQL;
  status: SQL;
  body: SQL;
  state: SQL;
}

export const outcomePlaceholders: OutcomeBindings = {
  kind: placeholder('kind'),
  status: placeholder('status'),
  body: placeholder('body'),
  state: placeholder('state'),
};

/** The state a completion leaves: `resumable` when asked (E8), `completed` otherwise. */
export function completedState(args: { resumable?: boolean }): 'completed' | 'resumable' {
  return args.resumable === true ? 'resumable' : 'completed';
}

export function outcomeParameters(outcome: StoredOutcome, resumable?: boolean) {
  return { kind: outcome.kind, status: outcome.status, body: outcome.body, state: completedState({ resumable }) };
}

/** {@link OutcomeBindings} carrying the values themselves. */
export function outcomeValues(outcome: StoredOutcome, resumable?: boolean): OutcomeBindings {
  return {
    kind: sql`${outcome.kind}`,
    status: sql`${outcome.status}`,
    body: sql`${outcome.body}`,
    state: sql`${completedState({ resumable })}`,
  };
}

/**
 * `complete`'s assignments. R1: retention counts from completion, so `expires_at` moves to now
 * plus the retention the claim was given (`expires_at − created_at`, a number of milliseconds on
 * SQLite, an interval on PostgreSQL, microseconds on MySQL). The state is the binding's:
 * `completed`, or `resumable` (E8), which keeps `completed_at` null and `expires_at` as it is: the
 * window a resumable failure may be resumed in counts from the first sight, and the completion
 * that ends it still finds the retention as `expires_at − created_at`.
 */
export function completion(
  clock: DatabaseClock,
  columns: { expiresAt: SQLWrapper; createdAt: SQLWrapper },
  outcome: OutcomeBindings = outcomePlaceholders,
) {
  return {
    state: outcome.state,
    completedAt: sql`CASE WHEN ${outcome.state} = 'resumable' THEN NULL ELSE ${clock.now} END`,
    expiresAt: sql`CASE WHEN ${outcome.state} = 'resumable' THEN ${columns.expiresAt} ELSE ${clock.afterSpan(columns.createdAt, columns.expiresAt)} END`,
    outcomeKind: outcome.kind,
    outcomeStatus: outcome.status,
    body: outcome.body,
  };
}

/**
 * R1, as SQL over a live table's columns: archived, or past its retention and not a `processing`
 * claim inside its lease (which never expires). The sweeper's and `idem policy`'s test.
 */
export function expiredAt(
  clock: DatabaseClock,
  columns: { state: SQLWrapper; expiresAt: SQLWrapper; leaseUntil: SQLWrapper },
): SQL {
  return sql`(${columns.expiresAt} <= ${clock.now} AND NOT (${columns.state} = 'processing' AND ${columns.leaseUntil} > ${clock.now}))`;
}

/** The live rows the sweeper archives (R1, R3): not archived yet, and expired. */
export function expiredLive(
  clock: DatabaseClock,
  columns: { state: SQLWrapper; expiresAt: SQLWrapper; leaseUntil: SQLWrapper },
): SQL {
  return sql`${columns.state} <> 'archived' AND ${expiredAt(clock, columns)}`;
}

/** The primary key of a live row, as a selection. */
export function primaryKeyOf<C extends { scope: Column; key: Column }>(columns: C): Pick<C, 'scope' | 'key'> {
  return { scope: columns.scope, key: columns.key };
}

/** The live table's columns the guards below read, in any dialect. */
interface GuardedColumns {
  scope: Column;
  key: Column;
  generation: Column;
  token: Column;
  state: Column;
  leaseUntil: Column;
  expiresAt: Column;
}

/** The record of (scope, key). */
export function thisKey(columns: Pick<GuardedColumns, 'scope' | 'key'>, b: Pick<ClaimBindings, 'scope' | 'key'>) {
  return and(eq(columns.scope, b.scope), eq(columns.key, b.key));
}

/** A claim still running: the one state in which its owner may write it (E6). */
function processing(columns: Pick<GuardedColumns, 'state'>): SQL {
  return sql`${columns.state} = 'processing'`;
}

/**
 * The `processing` claim of (scope, key) that `token` owns: what `complete`, `release`, `renew`
 * and atomic mode's lock match (E6). Every write an owner makes is guarded by this or by
 * {@link ownedClaims}; no statement spells the guard itself.
 */
export function ownedClaim(columns: Pick<GuardedColumns, 'scope' | 'key' | 'token' | 'state'>, b: OwnerBindings) {
  return and(thisKey(columns, b), eq(columns.token, b.token), processing(columns));
}

/**
 * The `processing` claims of `owners`, as one condition: `(scope, key, token) IN <list>`, the list
 * as the dialect writes a list of rows (`(VALUES (…), …)` on PostgreSQL and SQLite, `((…), …)` on MySQL).
 */
export function ownedClaims(
  columns: { scope: Column; key: Column; token: Column; state: Column },
  owners: readonly ClaimOwner[],
  rows: (rows: unknown[][]) => SQL,
): SQL {
  const list = rows(owners.map(({ scope, key, token }) => [scope, key, token]));
  return sql`(${columns.scope}, ${columns.key}, ${columns.token}) IN ${list} AND ${processing(columns)}`;
}

/** Rule 3 (`reclaim`), as a compare-and-set: still the released claim of `previousToken`, and not expired. */
export function stillReleased(clock: DatabaseClock, columns: GuardedColumns, b: ClaimBindings) {
  return and(
    thisKey(columns, b),
    eq(columns.token, b.previousToken),
    sql`${columns.state} = 'released'`,
    sql`${columns.expiresAt} > ${clock.now}`,
  );
}

/** E8, the resume rule, as a compare-and-set: still the `resumable` record of `previousToken`, not expired. */
export function stillResumable(clock: DatabaseClock, columns: GuardedColumns, b: ClaimBindings) {
  return and(
    thisKey(columns, b),
    eq(columns.token, b.previousToken),
    sql`${columns.state} = 'resumable'`,
    sql`${columns.expiresAt} > ${clock.now}`,
  );
}

/** Rule 4 (`takeover`), as a compare-and-set: still the `processing` claim of `previousToken`, its lease passed, not expired. */
export function stillStale(clock: DatabaseClock, columns: GuardedColumns, b: ClaimBindings) {
  return and(
    thisKey(columns, b),
    eq(columns.token, b.previousToken),
    sql`${columns.state} = 'processing'`,
    sql`${columns.leaseUntil} <= ${clock.now}`,
    sql`${columns.expiresAt} > ${clock.now}`,
  );
}

/**
 * Rule 2 (`reuse`), as a compare-and-set: still the generation `seen` of `previousToken`, and
 * still expired (archived, or past its retention and not a claim inside its lease: R1).
 */
export function stillExpired(clock: DatabaseClock, columns: GuardedColumns, b: ClaimBindings, generation: number) {
  return and(
    thisKey(columns, b),
    eq(columns.token, b.previousToken),
    eq(columns.generation, generation),
    or(sql`${columns.state} = 'archived'`, expiredAt(clock, columns)),
  );
}

/**
 * R3: archived in place; the body goes, status, fingerprint and timestamps stay, and the steps
 * keep their names with their results gone (E8: `stepNames`, the dialect's JSON of the column).
 */
export function archiving(clock: DatabaseClock, stepNames: SQL) {
  return { state: sql`'archived'`, archivedAt: clock.now, body: sql`NULL`, steps: stepNames };
}

/** The columns each table has after `reused_at`, added by later migrations (waits; E8's mode, attempts, steps). */
type LaterColumns = 'waits' | 'onFailure' | 'attempts' | 'steps';

/**
 * R2: the live row's columns (from `getTableColumns`) as they go into the history table. The
 * history table has the live table's columns in the same order, except that `reused_at` comes
 * before `waits`, `on_failure`, `attempts` and `steps` (each table ends with the columns its
 * later migrations added), which drizzle's insert-select checks. Archived: the body goes, the
 * steps keep their names only (`stepNames`, E8).
 */
export function historyCopy<TColumns extends { archivedAt: SQLWrapper } & Record<LaterColumns, SQLWrapper>>(
  columns: TColumns,
  clock: DatabaseClock,
  stepNames: SQL,
) {
  const { waits, onFailure, attempts, steps: _, ...kept } = columns;
  const copy = {
    ...kept,
    state: sql<'archived'>`'archived'`.as('state'),
    archivedAt: sql<Date>`coalesce(${columns.archivedAt}, ${clock.now})`.as('archived_at'),
    body: sql<null>`NULL`.as('body'),
    reusedAt: sql<Date>`${clock.now}`.as('reused_at'),
    waits,
    onFailure,
    attempts,
    steps: sql<string>`${stepNames}`.as('steps'),
  };
  return copy as Omit<TColumns, 'state' | 'archivedAt' | 'body' | LaterColumns> &
    Pick<typeof copy, 'state' | 'archivedAt' | 'body' | 'reusedAt' | 'steps'> &
    Pick<TColumns, 'waits' | 'onFailure' | 'attempts'>;
}

/** `(…), (…), …`: each row a parenthesised list of bound values (a group's `VALUES` or `IN` list). */
export function boundTuples(rows: readonly (readonly unknown[])[]): SQL {
  return sql.join(
    rows.map(
      (row) =>
        sql`(${sql.join(
          row.map((value) => sql`${value}`),
          sql`, `,
        )})`,
    ),
    sql`, `,
  );
}
