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

/** The amount that makes the channel fail after it charged (the 5xx idem stores and replays, E4). */
export const FAILING_AMOUNT = 13;

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
 * example's database so that several server processes share one channel. Amount 13 charges
 * and then fails unexpectedly, as a channel whose answer is lost would: that is why idem
 * stores 5xx outcomes once execution began.
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
        ? sql`CREATE TABLE IF NOT EXISTS payments_ledger (seq bigserial PRIMARY KEY, id text NOT NULL UNIQUE, account text NOT NULL, amount integer NOT NULL, currency text NOT NULL, created_at timestamptz NOT NULL DEFAULT now(), downstream_key text UNIQUE)`
        : sql`CREATE TABLE IF NOT EXISTS payments_ledger (seq integer PRIMARY KEY AUTOINCREMENT, id text NOT NULL UNIQUE, account text NOT NULL, amount integer NOT NULL, currency text NOT NULL, created_at text NOT NULL, downstream_key text UNIQUE)`,
    );
    const columns = pg
      ? await this.#all(
          sql`SELECT column_name AS name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'payments_ledger'`,
        )
      : await this.#all(sql`SELECT name FROM pragma_table_info('payments_ledger')`);
    if (!(columns as Array<{ name: string }>).some((column) => column.name === 'downstream_key')) {
      await this.#run(sql`ALTER TABLE payments_ledger ADD COLUMN downstream_key text`);
      await this.#run(
        sql`CREATE UNIQUE INDEX IF NOT EXISTS payments_ledger_downstream_key ON payments_ledger (downstream_key)`,
      );
    }
  }

  /**
   * {@link charge} for the request idem claimed: under the key it derives from the claim's key
   * and generation (`deriveKey('channel')`: a re-execution after a lease takeover charges once),
   * and in atomic mode through idem's transaction (`claim.tx`), so the ledger row commits with
   * the claim. The claim's `signal` (E6) stops a charge whose claim was lost (taken over after its
   * owner stalled past the lease) before it reaches the ledger. Without a claim, a plain charge.
   */
  chargeFor(
    payment: { account: string; amount: number; currency: string },
    claim:
      | { deriveKey(label: string): string; tx?: DrizzleDatabase | undefined; signal?: AbortSignal | undefined }
      | undefined,
  ): Promise<Charge> {
    return this.charge({ ...payment, downstreamKey: claim?.deriveKey('channel'), signal: claim?.signal }, claim?.tx);
  }

  /**
   * Charges, as a provider with idempotency keys does: a charge whose `downstreamKey` the
   * channel already saw is not charged again — the earlier charge is answered instead. idem
   * derives that key from the request's key and generation (`deriveKey('channel')`), so a
   * re-execution after a lease takeover (E6) does not charge twice. `db` is the database to
   * write through: the idem transaction in atomic mode.
   */
  async charge(
    {
      account,
      amount,
      currency,
      downstreamKey,
      signal,
    }: {
      account: string;
      amount: number;
      currency: string;
      downstreamKey?: string | undefined;
      signal?: AbortSignal | undefined;
    },
    db: DrizzleDatabase = this.#db,
  ): Promise<Charge> {
    if (this.#delayMs > 0) await delay(this.#delayMs, undefined, signal ? { signal } : {});
    signal?.throwIfAborted();
    const charge: Charge = {
      id: `pay_${randomUUID().replaceAll('-', '')}`,
      amount,
      currency,
      createdAt: new Date().toISOString(),
    };
    const key = downstreamKey ?? null;
    let inserted: unknown[];
    try {
      inserted = await this.#all(
        sql`INSERT INTO payments_ledger (id, account, amount, currency, created_at, downstream_key) VALUES (${charge.id}, ${account}, ${amount}, ${currency}, ${charge.createdAt}, ${key}) ON CONFLICT (downstream_key) DO NOTHING RETURNING id`,
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
