import { randomUUID } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { sql, type SQL } from 'drizzle-orm';
import { is } from 'drizzle-orm';
import { PgDatabase } from 'drizzle-orm/pg-core';
import { retryConcurrentDdl, retrySqliteBusy, type DrizzleDatabase } from '@idem/drizzle';

export interface LedgerEntry {
  id: string;
  amount: number;
  currency: string;
}

export interface Charge extends LedgerEntry {
  createdAt: string;
}

/** The amount held on the account before the charge (the payment's first step, `reserve`). */
export interface Reservation extends LedgerEntry {
  createdAt: string;
}

/** What the ledger holds for one of an account's idempotency keys (every operation): `GET /v1/ledger?key=…`. */
export interface KeyLedger {
  account: string;
  key: string;
  /** Reservations held for it. */
  reservations: number;
  /**
   * How many times the reservation was asked for (its reservation key deduplicates the repeats):
   * 1 when a resume skipped the completed `reserve` step (E8), more when the part ran again.
   */
  reserveRuns: number;
  /** Charges in the ledger for it. */
  charges: number;
  /** Charge attempts that timed out (amount 14: the first under each downstream key). */
  timeouts: number;
}

/** The claim as the payment reads it: a subset of idem's `ClaimContext`, with the transaction typed. */
export interface PaymentClaim {
  scope: string;
  key: string;
  deriveKey(label: string): string;
  step<T>(name: string, run: (stepKey: string) => Promise<T> | T): Promise<T>;
  tx?: DrizzleDatabase | undefined;
  signal?: AbortSignal | undefined;
}

/**
 * `IDEM_SEMANTICS`: `v1` (Stripe v1, `onFailure: 'replay'`: once started, every outcome is stored
 * and replayed) or `v2` (Stripe v2, `onFailure: 'resume'`: a 5xx after the start is resumable, a
 * retry with the same key completes it, skipping the steps done).
 */
export type Semantics = 'v1' | 'v2';

/** The amount that makes the channel fail after it charged (the 5xx idem stores and replays, E4). */
export const FAILING_AMOUNT = 13;

/**
 * The amount whose first charge attempt under each downstream key times out (a provider timeout,
 * answered 504) without charging; the next attempt under that key charges. Under
 * `IDEM_SEMANTICS=v1` the 504 is stored and replayed (E4); under `v2` it is resumable (E8): the
 * retry skips the reservation already made and charges, one reservation and one charge.
 */
export const TRANSIENT_AMOUNT = 14;

/** The amount the channel declines (402, card declined) after the reservation: a final failure, replayed in both modes. */
export const DECLINED_AMOUNT = 15;

/**
 * The channel's own failure after it charged (amount 13). Its message is meant for the client and
 * is answered as it is; any other unexpected error is answered with a generic message.
 */
export class PaymentChannelError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'PaymentChannelError';
  }
}

/**
 * The channel did not answer in time (amount 14, first attempt under a downstream key): nothing
 * was charged; the provider has seen the attempt, and the next one under the same downstream key
 * charges. Answered 504.
 */
export class PaymentChannelTimeoutError extends Error {
  constructor(amount: number, currency: string) {
    super(`The payment channel timed out charging ${amount} ${currency}; nothing was charged.`);
    this.name = 'PaymentChannelTimeoutError';
  }
}

/** The channel declined the charge (amount 15): the client's to fix, answered 402, stored and replayed in both modes. */
export class PaymentDeclinedError extends Error {
  constructor(amount: number, currency: string) {
    super(`The payment channel declined the charge of ${amount} ${currency}: card declined. Nothing was charged.`);
    this.name = 'PaymentDeclinedError';
  }
}

/**
 * The ledger write failed (a lost database connection, say) and the ledger holds no charge under
 * the request's downstream key: nothing was charged, so the resolvers give the key back
 * (`notStarted(ctx, error)`, E4) and a retry with it charges. Even when the lookup itself fails
 * this is safe: the retry charges under the same downstream key, which the channel deduplicates.
 * `cause` is the database error, for the server's log; the message names no SQL.
 */
export class ChargeNotRecordedError extends Error {
  constructor(override readonly cause: unknown) {
    super('The payment could not be recorded and was not charged. Retry with the same Idempotency-Key.', { cause });
    this.name = 'ChargeNotRecordedError';
  }
}

/**
 * The largest amount a payment may have: the ledger's `integer` column (PostgreSQL's 32-bit
 * `integer`) holds no more. The schemas refuse larger amounts with 400 before anything is claimed.
 */
export const MAX_AMOUNT = 2 ** 31 - 1;

/**
 * The database refused the payment's data (PostgreSQL SQLSTATE class 22, data exception: an
 * amount out of range, say): the input is wrong, not the service. Nothing was charged (the ledger
 * row was not written), so the resolvers answer 400 and give the key back (E4) — never a 503
 * "retry with the same key" that would fail for ever, nor a stored 500.
 */
export class ChargeRefusedError extends Error {
  constructor(override readonly cause: unknown) {
    super(
      'The payment was refused: its data does not fit the ledger (e.g. an amount out of range). Nothing was charged.',
      {
        cause,
      },
    );
    this.name = 'ChargeRefusedError';
  }
}

/** Whether `error` (or an error it wraps) is a PostgreSQL data exception: SQLSTATE class 22. */
export function isDataException(error: unknown): boolean {
  let current = error;
  for (let depth = 0; depth < 8 && current instanceof Error; depth++) {
    const { code } = current as { code?: unknown };
    if (typeof code === 'string' && /^22[0-9A-Z]{3}$/.test(code)) return true;
    current = current.cause;
  }
  return false;
}

/**
 * A simulated payment channel. Every charge it sees is appended to its ledger, kept in the
 * example's database so that several server processes share one channel, and so are the
 * reservations made before each charge. Amount 13 charges and then fails unexpectedly, as a
 * channel whose answer is lost would: that is why idem stores 5xx outcomes once execution
 * began. Amount 14's first attempt under a downstream key times out without charging (504), the
 * next charges: the failure `IDEM_SEMANTICS=v2` resumes (E8). Amount 15 is declined (402).
 */
export class PaymentChannel {
  readonly #db: DrizzleDatabase;
  readonly #delayMs: number;

  constructor(db: DrizzleDatabase, { delayMs = 0 }: { delayMs?: number } = {}) {
    this.#db = db;
    this.#delayMs = delayMs;
  }

  /** Creates the ledger table when it is missing (and adds the downstream key to an older one). */
  async migrate(): Promise<void> {
    // Several servers may start at once on a fresh database (the reliability suite does).
    await retryConcurrentDdl(() => this.#createLedger());
  }

  async #createLedger(): Promise<void> {
    const pg = this.#isPg();
    await this.#run(
      pg
        ? sql`CREATE TABLE IF NOT EXISTS payments_ledger (seq bigserial PRIMARY KEY, id text NOT NULL UNIQUE, account text NOT NULL, amount integer NOT NULL, currency text NOT NULL, created_at timestamptz NOT NULL DEFAULT now(), downstream_key text UNIQUE, idempotency_key text)`
        : sql`CREATE TABLE IF NOT EXISTS payments_ledger (seq integer PRIMARY KEY AUTOINCREMENT, id text NOT NULL UNIQUE, account text NOT NULL, amount integer NOT NULL, currency text NOT NULL, created_at text NOT NULL, downstream_key text UNIQUE, idempotency_key text)`,
    );
    const columns = (
      (pg
        ? await this.#all(
            sql`SELECT column_name AS name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'payments_ledger'`,
          )
        : await this.#all(sql`SELECT name FROM pragma_table_info('payments_ledger')`)) as Array<{ name: string }>
    ).map((column) => column.name);
    // A ledger made by an older version of the example lacks the later columns. Another server
    // starting at the same moment may add one between this read and the ALTER: PostgreSQL skips
    // it (IF NOT EXISTS), SQLite fails with "duplicate column name", which retryConcurrentDdl
    // runs again from the top, where the read now finds the column.
    const addColumn = (column: string) =>
      pg
        ? sql`ALTER TABLE payments_ledger ADD COLUMN IF NOT EXISTS ${sql.identifier(column)} text`
        : sql`ALTER TABLE payments_ledger ADD COLUMN ${sql.identifier(column)} text`;
    if (!columns.includes('downstream_key')) {
      await this.#run(addColumn('downstream_key'));
      await this.#run(
        sql`CREATE UNIQUE INDEX IF NOT EXISTS payments_ledger_downstream_key ON payments_ledger (downstream_key)`,
      );
    }
    // The idempotency key a charge was made for (its account is `account`): GET /v1/ledger?key=… counts by it.
    if (!columns.includes('idempotency_key')) await this.#run(addColumn('idempotency_key'));
    await this.#run(
      sql`CREATE INDEX IF NOT EXISTS payments_ledger_idempotency_key ON payments_ledger (account, idempotency_key)`,
    );
    // The payment's first step: the amount held on the account, once per reservation key.
    await this.#run(
      pg
        ? sql`CREATE TABLE IF NOT EXISTS payments_reservations (seq bigserial PRIMARY KEY, id text NOT NULL UNIQUE, account text NOT NULL, amount integer NOT NULL, currency text NOT NULL, created_at timestamptz NOT NULL DEFAULT now(), reservation_key text UNIQUE, idempotency_key text, requests integer NOT NULL DEFAULT 1)`
        : sql`CREATE TABLE IF NOT EXISTS payments_reservations (seq integer PRIMARY KEY AUTOINCREMENT, id text NOT NULL UNIQUE, account text NOT NULL, amount integer NOT NULL, currency text NOT NULL, created_at text NOT NULL, reservation_key text UNIQUE, idempotency_key text, requests integer NOT NULL DEFAULT 1)`,
    );
    await this.#run(
      sql`CREATE INDEX IF NOT EXISTS payments_reservations_idempotency_key ON payments_reservations (account, idempotency_key)`,
    );
    // The provider's own memory of the charge attempts it saw per downstream key (amount 14 times out on the first).
    await this.#run(
      sql`CREATE TABLE IF NOT EXISTS payments_channel_attempts (downstream_key text PRIMARY KEY, account text NOT NULL, idempotency_key text, attempts integer NOT NULL)`,
    );
    await this.#run(
      sql`CREATE INDEX IF NOT EXISTS payments_channel_attempts_idempotency_key ON payments_channel_attempts (account, idempotency_key)`,
    );
  }

  /**
   * The payment idem claimed, in two steps, each under its own downstream key derived from the
   * claim's key and generation (`deriveKey('reserve')`, `deriveKey('charge')`: a re-execution
   * charges once): `reserve` holds the amount on the account, then `charge` calls the channel.
   * In atomic mode both write through idem's transaction (`claim.tx`). The claim's `signal`
   * (E6) stops a charge whose claim was lost before it reaches the ledger.
   *
   * With `steps` (`IDEM_SEMANTICS=v2`, `onFailure: 'resume'`) each runs through `claim.step`:
   * its result is stored with the record, so a retry that resumes a failed payment (E8) gets the
   * reservation back without reserving again, and only charges. Without (`v1`), both run as
   * before steps existed, under the same keys: a failure after the start is stored and
   * replayed anyway, and a lost ledger write (nothing charged) can still give the key back
   * (`notStarted`, E4), which idem refuses once a step is recorded. Without a claim, a plain payment.
   */
  async pay(
    payment: { account: string; amount: number; currency: string },
    claim: PaymentClaim | undefined,
    { steps = false }: { steps?: boolean } = {},
  ): Promise<Charge> {
    const owner = { idempotencyKey: claim?.key, signal: claim?.signal };
    const part = <T>(name: string, run: (key: string | undefined) => Promise<T>): Promise<T> =>
      claim === undefined ? run(undefined) : steps ? claim.step(name, run) : run(claim.deriveKey(name));
    await part('reserve', (key) => this.reserve({ ...payment, ...owner, reservationKey: key }, claim?.tx));
    return part('charge', (key) => this.charge({ ...payment, ...owner, downstreamKey: key }, claim?.tx));
  }

  /**
   * Holds `amount` on the account, once per `reservationKey`: a reservation whose key was seen
   * is answered again, not made twice (and the repeat is counted). `db`: the idem transaction in
   * atomic mode.
   */
  async reserve(
    {
      account,
      amount,
      currency,
      reservationKey,
      idempotencyKey,
      signal,
    }: {
      account: string;
      amount: number;
      currency: string;
      reservationKey?: string | undefined;
      idempotencyKey?: string | undefined;
      signal?: AbortSignal | undefined;
    },
    db: DrizzleDatabase = this.#db,
  ): Promise<Reservation> {
    signal?.throwIfAborted();
    const reservation: Reservation = {
      id: `res_${randomUUID().replaceAll('-', '')}`,
      amount,
      currency,
      createdAt: new Date().toISOString(),
    };
    const key = reservationKey ?? null;
    let inserted: Array<{ id: string }>;
    try {
      inserted = (await this.#all(
        sql`INSERT INTO payments_reservations (id, account, amount, currency, created_at, reservation_key, idempotency_key) VALUES (${reservation.id}, ${account}, ${amount}, ${currency}, ${reservation.createdAt}, ${key}, ${idempotencyKey ?? null}) ON CONFLICT (reservation_key) DO UPDATE SET requests = payments_reservations.requests + 1 RETURNING id`,
        db,
      )) as Array<{ id: string }>;
    } catch (error) {
      if (isDataException(error)) throw new ChargeRefusedError(error);
      // Nothing was reserved when the statement failed outright; the caller answers 503 (or the engine, in atomic mode).
      if (key === null || db !== this.#db) throw error;
      const earlier = await this.#reservationUnder(key, this.#db).catch(() => undefined);
      if (earlier) return earlier;
      console.error(`[payments] reservation write failed, nothing reserved: ${innermostMessage(error)}`);
      throw new ChargeNotRecordedError(error);
    }
    if (inserted[0]?.id !== reservation.id && key !== null) {
      const earlier = await this.#reservationUnder(key, db);
      if (earlier) return earlier;
    }
    return reservation;
  }

  /** The reservation held under `reservationKey`, if any. */
  async #reservationUnder(reservationKey: string, db: DrizzleDatabase): Promise<Reservation | undefined> {
    const [earlier] = (await this.#all(
      sql`SELECT id, amount, currency, created_at FROM payments_reservations WHERE reservation_key = ${reservationKey}`,
      db,
    )) as Array<{ id: string; amount: number | string; currency: string; created_at: string | Date }>;
    return earlier
      ? {
          id: earlier.id,
          amount: Number(earlier.amount),
          currency: earlier.currency,
          createdAt: new Date(earlier.created_at).toISOString(),
        }
      : undefined;
  }

  /**
   * Charges, as a provider with idempotency keys does: a charge whose `downstreamKey` the
   * channel already saw is not charged again — the earlier charge is answered instead. idem
   * derives that key from the request's key and generation (`deriveKey('charge')`), so a
   * re-execution after a lease takeover (E6) or a resume (E8) does not charge twice. `db` is the
   * database to write through: the idem transaction in atomic mode. The provider's own count of
   * attempts per downstream key is written outside it (amount 14: the first attempt times out).
   */
  async charge(
    {
      account,
      amount,
      currency,
      downstreamKey,
      idempotencyKey,
      signal,
    }: {
      account: string;
      amount: number;
      currency: string;
      downstreamKey?: string | undefined;
      idempotencyKey?: string | undefined;
      signal?: AbortSignal | undefined;
    },
    db: DrizzleDatabase = this.#db,
  ): Promise<Charge> {
    if (this.#delayMs > 0) await delay(this.#delayMs, undefined, signal ? { signal } : {});
    signal?.throwIfAborted();
    const key = downstreamKey ?? null;
    if (amount === DECLINED_AMOUNT) throw new PaymentDeclinedError(amount, currency);
    // The provider remembers the attempt whatever becomes of the caller's transaction.
    if (amount === TRANSIENT_AMOUNT && (await this.#countAttempt(account, key, idempotencyKey ?? null)) === 1)
      throw new PaymentChannelTimeoutError(amount, currency);
    const charge: Charge = {
      id: `pay_${randomUUID().replaceAll('-', '')}`,
      amount,
      currency,
      createdAt: new Date().toISOString(),
    };
    let inserted: unknown[];
    try {
      inserted = await this.#all(
        sql`INSERT INTO payments_ledger (id, account, amount, currency, created_at, downstream_key, idempotency_key) VALUES (${charge.id}, ${account}, ${amount}, ${currency}, ${charge.createdAt}, ${key}, ${idempotencyKey ?? null}) ON CONFLICT (downstream_key) DO NOTHING RETURNING id`,
        db,
      );
    } catch (error) {
      // Bad data is the client's to fix: 400, nothing charged (the statement wrote nothing).
      if (isDataException(error)) throw new ChargeRefusedError(error);
      // In atomic mode the transaction is lost with the write: idem answers 503, nothing commits.
      if (key === null || db !== this.#db) throw error;
      return this.#recoverLostWrite(key, error);
    }
    if (inserted.length === 0 && key !== null) {
      const earlier = await this.#chargeUnder(key, db);
      if (earlier) return earlier;
    }
    if (amount === FAILING_AMOUNT)
      throw new PaymentChannelError(`payment channel failed unexpectedly after charging ${amount} ${currency}`);
    return charge;
  }

  /** Counts one more attempt of amount 14 under `downstreamKey` (each is a first without a key), and returns the count. */
  async #countAttempt(account: string, downstreamKey: string | null, idempotencyKey: string | null): Promise<number> {
    const key = downstreamKey ?? `none_${randomUUID()}`;
    const [row] = (await this.#all(
      sql`INSERT INTO payments_channel_attempts (downstream_key, account, idempotency_key, attempts) VALUES (${key}, ${account}, ${idempotencyKey}, 1) ON CONFLICT (downstream_key) DO UPDATE SET attempts = payments_channel_attempts.attempts + 1 RETURNING attempts`,
    )) as Array<{ attempts: number | string }>;
    return Number(row!.attempts);
  }

  /**
   * What the ledger holds for `account`'s idempotency key `key` (every operation together):
   * reservations, charges, and the charge attempts that timed out (amount 14).
   */
  async keyLedger(account: string, key: string): Promise<KeyLedger> {
    const count = async (query: SQL) => Number(((await this.#all(query)) as Array<{ n: number | string }>)[0]!.n);
    const [reservations, reserveRuns, charges, timeouts] = await Promise.all([
      count(
        sql`SELECT count(*) AS n FROM payments_reservations WHERE account = ${account} AND idempotency_key = ${key}`,
      ),
      count(
        sql`SELECT coalesce(sum(requests), 0) AS n FROM payments_reservations WHERE account = ${account} AND idempotency_key = ${key}`,
      ),
      count(sql`SELECT count(*) AS n FROM payments_ledger WHERE account = ${account} AND idempotency_key = ${key}`),
      count(
        sql`SELECT count(*) AS n FROM payments_channel_attempts WHERE account = ${account} AND idempotency_key = ${key}`,
      ),
    ]);
    return { account, key, reservations, reserveRuns, charges, timeouts };
  }

  /**
   * The INSERT failed, and its connection's answer with it: it may have committed or not. The
   * ledger, read over another connection, says which: a charge under `downstreamKey` is the
   * answer; none means nothing was charged ({@link ChargeNotRecordedError}).
   */
  async #recoverLostWrite(downstreamKey: string, error: unknown): Promise<Charge> {
    let earlier: Charge | undefined;
    try {
      earlier = await this.#chargeUnder(downstreamKey, this.#db);
    } catch {
      earlier = undefined;
    }
    if (earlier) return earlier;
    console.error(`[payments] ledger write failed, nothing charged: ${innermostMessage(error)}`);
    throw new ChargeNotRecordedError(error);
  }

  /** The charge the ledger holds under `downstreamKey`, if any. */
  async #chargeUnder(downstreamKey: string, db: DrizzleDatabase): Promise<Charge | undefined> {
    const [earlier] = (await this.#all(
      sql`SELECT id, amount, currency, created_at FROM payments_ledger WHERE downstream_key = ${downstreamKey}`,
      db,
    )) as Array<{ id: string; amount: number | string; currency: string; created_at: string | Date }>;
    return earlier
      ? {
          id: earlier.id,
          amount: Number(earlier.amount),
          currency: earlier.currency,
          createdAt: new Date(earlier.created_at).toISOString(),
        }
      : undefined;
  }

  /** Every charge the channel saw, oldest first. */
  async ledger(): Promise<LedgerEntry[]> {
    const rows = await this.#all(sql`SELECT id, amount, currency FROM payments_ledger ORDER BY seq`);
    return (rows as Array<{ id: string; amount: number | string; currency: string }>).map((row) => ({
      id: row.id,
      amount: Number(row.amount),
      currency: row.currency,
    }));
  }

  #isPg(db: DrizzleDatabase = this.#db): boolean {
    return is(db, PgDatabase);
  }

  // SQLite: the connection does not wait for another process's write lock (busy_timeout 0, which
  // would block the event loop); `retrySqliteBusy` waits for it asynchronously.
  async #run(query: SQL, db: DrizzleDatabase = this.#db): Promise<void> {
    if (this.#isPg(db)) await (db as PgLike).execute(query);
    else await retrySqliteBusy(() => (db as SqliteLike).run(query));
  }

  async #all(query: SQL, db: DrizzleDatabase = this.#db): Promise<unknown[]> {
    if (!this.#isPg(db)) return retrySqliteBusy(() => (db as SqliteLike).all(query));
    // node-postgres answers `{ rows }`, postgres-js the rows themselves.
    const result = await (db as PgLike).execute(query);
    return Array.isArray(result) ? result : result.rows;
  }
}

/** The driver's own message (drizzle's "Failed query: …" wraps it with the statement and its parameters). */
export function innermostMessage(error: unknown): string {
  let current = error;
  for (let depth = 0; depth < 8 && current instanceof Error && current.cause !== undefined; depth++)
    current = current.cause;
  return (current instanceof Error ? current.message : String(current)).split('\n')[0]!;
}

type PgLike = { execute(query: SQL): Promise<{ rows: unknown[] } | unknown[]> };
type SqliteLike = { run(query: SQL): unknown; all(query: SQL): unknown[] };
