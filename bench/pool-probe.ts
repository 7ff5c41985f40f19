/**
 * Development (issue 34): where a request's time goes at a `pg.Pool`. Wraps the pool's `query`
 * (what drizzle's node-postgres session calls outside transactions) and `connect` (which `query`
 * calls synchronously), and counts per statement kind: how many, the time waiting for a
 * connection, the time from sending to the answer, and the rows of each grouped statement.
 */
import type pg from 'pg';

export interface StatementStats {
  count: number;
  /** Median and 90th percentile of the wait for a pool connection, ms. */
  waitP50Ms: number;
  waitP90Ms: number;
  /** Median and 90th percentile from the connection in hand to the answer, ms. */
  runP50Ms: number;
  runP90Ms: number;
  /** Grouped statements: median, 90th percentile and maximum rows per statement. */
  rowsP50?: number;
  rowsP90?: number;
  rowsMax?: number;
}

export type PoolStats = Record<string, StatementStats>;

interface Samples {
  waits: number[];
  runs: number[];
  rows: number[];
}

/**
 * What a statement is, from its name (the store's prepared statements) or its text (the grouped
 * forms of builds before their statements were prepared), and how to count a group's rows from
 * its values: bound values per row (`VALUES` lists), or `arrays` (one array parameter per column).
 */
function kindOf(config: unknown): { kind: string; rowsPer?: number | 'arrays' } {
  const text = typeof config === 'string' ? config : ((config as { text?: string }).text ?? '');
  const name = typeof config === 'object' && config ? (config as { name?: string }).name : undefined;
  if (name?.endsWith('_many', name.indexOf(':', 5))) return { kind: name.split(':')[1] ?? name, rowsPer: 'arrays' };
  if (name?.startsWith('idem:')) return { kind: name.split(':')[1] ?? name };
  if (text.includes('idem_claimed')) return { kind: 'claim group', rowsPer: 11 };
  if (text.includes('idem_v') && text.startsWith('UPDATE')) return { kind: 'complete group', rowsPer: 7 };
  return { kind: text.split(/\s+/).slice(0, 2).join(' ') || 'other' };
}

function quantile(values: number[], q: number): number {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] as number;
}

export class PoolProbe {
  #samples = new Map<string, Samples>();

  constructor(pool: pg.Pool) {
    const connect = pool.connect.bind(pool) as (cb: (error: Error | undefined, client: pg.PoolClient) => void) => void;
    const query = pool.query.bind(pool) as (config: unknown, values?: unknown[]) => Promise<unknown>;
    let acquired: ((at: number) => void) | undefined;
    // `query` calls `connect(callback)` synchronously: the callback fires when a connection is free.
    (pool as unknown as { connect: unknown }).connect = (
      callback?: (e: Error | undefined, c: pg.PoolClient) => void,
    ) => {
      if (!callback) return connect.call(pool, undefined as never);
      const onAcquired = acquired;
      acquired = undefined;
      return connect((error, client) => {
        onAcquired?.(performance.now());
        callback(error, client);
      });
    };
    (pool as unknown as { query: unknown }).query = (config: unknown, values?: unknown[]) => {
      const { kind, rowsPer } = kindOf(config);
      const sent = performance.now();
      let inHand = sent;
      acquired = (at) => {
        inHand = at;
      };
      const samples = this.#of(kind);
      return query(config, values).finally(() => {
        samples.waits.push(inHand - sent);
        samples.runs.push(performance.now() - inHand);
        const first = (values ?? (config as { values?: unknown[] }).values)?.[0];
        if (rowsPer === 'arrays' && Array.isArray(first)) samples.rows.push(first.length);
        else if (typeof rowsPer === 'number' && values) samples.rows.push(values.length / rowsPer);
      });
    };
  }

  #of(kind: string): Samples {
    let samples = this.#samples.get(kind);
    if (!samples) {
      samples = { waits: [], runs: [], rows: [] };
      this.#samples.set(kind, samples);
    }
    return samples;
  }

  /** The counts since the last call, and starts counting afresh. */
  take(): PoolStats {
    const stats: PoolStats = {};
    for (const [kind, { waits, runs, rows }] of this.#samples) {
      stats[kind] = {
        count: runs.length,
        waitP50Ms: quantile(waits, 0.5),
        waitP90Ms: quantile(waits, 0.9),
        runP50Ms: quantile(runs, 0.5),
        runP90Ms: quantile(runs, 0.9),
        ...(rows.length > 0
          ? { rowsP50: quantile(rows, 0.5), rowsP90: quantile(rows, 0.9), rowsMax: Math.max(...rows) }
          : {}),
      };
    }
    this.#samples.clear();
    return stats;
  }
}
