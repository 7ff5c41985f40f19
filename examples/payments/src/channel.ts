import { randomUUID } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { is } from 'drizzle-orm';
import { PgDatabase } from 'drizzle-orm/pg-core';
import type { DrizzleDatabase } from '@idem/drizzle';

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

  /** Creates the ledger table when it is missing. */
  async migrate(): Promise<void> {
    if (this.#isPg()) {
      await (this.#db as PgLike).execute(
        sql`CREATE TABLE IF NOT EXISTS payments_ledger (seq bigserial PRIMARY KEY, id text NOT NULL UNIQUE, account text NOT NULL, amount integer NOT NULL, currency text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`,
      );
    } else {
      (this.#db as SqliteLike).run(
        sql`CREATE TABLE IF NOT EXISTS payments_ledger (seq integer PRIMARY KEY AUTOINCREMENT, id text NOT NULL UNIQUE, account text NOT NULL, amount integer NOT NULL, currency text NOT NULL, created_at text NOT NULL)`,
      );
    }
  }

  async charge({ account, amount, currency }: { account: string; amount: number; currency: string }): Promise<Charge> {
    if (this.#delayMs > 0) await new Promise((resolve) => setTimeout(resolve, this.#delayMs));
    const charge: Charge = { id: `pay_${randomUUID().replaceAll('-', '')}`, amount, currency, createdAt: new Date().toISOString() };
    const insert = sql`INSERT INTO payments_ledger (id, account, amount, currency, created_at) VALUES (${charge.id}, ${account}, ${amount}, ${currency}, ${charge.createdAt})`;
    if (this.#isPg()) await (this.#db as PgLike).execute(insert);
    else (this.#db as SqliteLike).run(insert);
    if (amount === FAILING_AMOUNT) throw new Error(`payment channel failed unexpectedly after charging ${amount} ${currency}`);
    return charge;
  }

  /** Every charge the channel saw, oldest first. */
  async ledger(): Promise<LedgerEntry[]> {
    const query = sql`SELECT id, amount, currency FROM payments_ledger ORDER BY seq`;
    const rows = this.#isPg() ? (await (this.#db as PgLike).execute(query)).rows : (this.#db as SqliteLike).all(query);
    return (rows as Array<{ id: string; amount: number | string; currency: string }>).map((row) => ({ id: row.id, amount: Number(row.amount), currency: row.currency }));
  }

  #isPg(): boolean {
    return is(this.#db, PgDatabase);
  }
}

type PgLike = { execute(query: ReturnType<typeof sql>): Promise<{ rows: unknown[] }> };
type SqliteLike = { run(query: ReturnType<typeof sql>): unknown; all(query: ReturnType<typeof sql>): unknown[] };
