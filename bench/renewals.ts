/**
 * Parts `renewals` and `wait` (issue 33), on PostgreSQL (node-postgres, a pool of 10):
 *
 * - `renewals`: what E6's lease renewal costs. 1,000 handlers in flight through the engine, each
 *   held for the measuring window, with a 3 s lease (renewed every second): the renewals the store
 *   is asked for per second, and the database writes (`UPDATE … lease_until`, counted at the pool)
 *   per second that carry them, group commit on and off. Then the fresh path at 64 concurrent
 *   requests with short handlers, this build against a baseline build (`--baseline <dir>`, as the
 *   floor part), interleaved in rounds: the renewal timer each request now sets and clears.
 * - `wait`: E3w against E3. A mix of clients, each sending a payment and, after a random pause
 *   shorter than the handler, the same request again (the retry of a client that timed out),
 *   answered by an engine without `wait` and by one with `wait: '5s'`, in one run: the share of
 *   409s among all answers, and the executions (one per key either way); then the same mix over
 *   HTTP against the payments example (`POST /v1/payments`), one server without `IDEM_WAIT` and one
 *   with `IDEM_WAIT=5s` on one PostgreSQL schema, as the soak of issue 33 measured it.
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { createEngine, RequestInProgressError } from '@idem/core';
import { createDrizzleStore } from '@idem/drizzle';
import { openBenchPostgres, type BenchPostgres } from './databases.ts';
import { interleave, median, medianRatio, ratioSpread } from './measure.ts';
import { table } from './report.ts';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Counts the statements the pool is sent whose text matches `pattern`. */
function countStatements(database: BenchPostgres, pattern: RegExp): { readonly count: number; stop(): void } {
  const pool = database.pool as unknown as { query: (...args: unknown[]) => unknown };
  const original = pool.query;
  let count = 0;
  pool.query = function (this: unknown, ...args: unknown[]) {
    const [first] = args;
    const text = typeof first === 'string' ? first : (first as { text?: string } | undefined)?.text;
    if (text && pattern.test(text)) count++;
    return original.apply(this, args);
  } as typeof pool.query;
  return {
    get count() {
      return count;
    },
    stop() {
      pool.query = original;
    },
  };
}

export interface RenewalsResult {
  groupCommit: boolean;
  handlers: number;
  leaseMs: number;
  seconds: number;
  renewalsPerSecond: number;
  writesPerSecond: number;
  rowsPerWrite: number;
}

export interface FreshPathResult {
  concurrency: number;
  rounds: number;
  requestsPerSecond: { current: number; baseline: number | null };
  /** Median of the per-round ratios current / baseline (throughput), with its 25th–75th percentiles. */
  ratio: { median: number; p25: number; p75: number } | null;
}

export interface WaitResult {
  /** Where the mix ran: the engine in this process, or the example's REST route over HTTP. */
  transport: 'engine' | 'HTTP';
  waitMs: number;
  clients: number;
  answers: number;
  conflicts: number;
  conflictShare: number;
  replays: number;
  executions: number;
}

async function renewalLoad(groupCommit: boolean, quick: boolean): Promise<RenewalsResult> {
  const handlers = 1000;
  const leaseMs = 3000;
  const seconds = quick ? 4 : 9;
  const database = await openBenchPostgres({ max: 10 });
  try {
    const store = createDrizzleStore(database.db, { groupCommit });
    let renewals = 0;
    const counted = { ...store, renew: (args: Parameters<typeof store.renew>[0]) => (renewals++, store.renew(args)) };
    const engine = createEngine({ store: counted, lease: leaseMs });
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const running = Array.from({ length: handlers }, () =>
      engine.execute({ scope: 'bench/renewals', key: randomUUID(), fingerprint: null }, () => gate),
    );
    // Past the first renewal of every claim, then count for the window.
    await sleep(leaseMs / 3 + 500);
    const writes = countStatements(database, /^update .*"lease_until" = /i);
    const renewedBefore = renewals;
    const started = Date.now();
    await sleep(seconds * 1000);
    const elapsed = (Date.now() - started) / 1000;
    const asked = renewals - renewedBefore;
    const written = writes.count;
    writes.stop();
    release();
    await Promise.all(running);
    return {
      groupCommit,
      handlers,
      leaseMs,
      seconds: elapsed,
      renewalsPerSecond: asked / elapsed,
      writesPerSecond: written / elapsed,
      rowsPerWrite: written === 0 ? 0 : asked / written,
    };
  } finally {
    await database.close();
  }
}

type Build = { createEngine: typeof createEngine; createDrizzleStore: typeof createDrizzleStore };

async function loadBuild(directory: string): Promise<Build> {
  const entry = (name: string) =>
    pathToFileURL(join(directory, 'node_modules', '@idem', name, 'dist', 'index.js')).href;
  const [core, drizzle] = await Promise.all([import(entry('core')), import(entry('drizzle'))]);
  return { createEngine: core.createEngine, createDrizzleStore: drizzle.createDrizzleStore } as Build;
}

async function freshPath(quick: boolean, baselineDirectory: string | undefined): Promise<FreshPathResult> {
  const concurrency = 64;
  const perBatch = 2000;
  const rounds = quick ? 5 : 15;
  const current: Build = { createEngine, createDrizzleStore };
  const baseline = baselineDirectory === undefined ? undefined : await loadBuild(baselineDirectory);
  const databases: BenchPostgres[] = [];
  try {
    const batchOf = async (build: Build) => {
      const database = await openBenchPostgres({ max: 10 });
      databases.push(database);
      const engine = build.createEngine({ store: build.createDrizzleStore(database.db) });
      return async () => {
        let next = 0;
        const start = process.hrtime.bigint();
        await Promise.all(
          Array.from({ length: concurrency }, async () => {
            while (next++ < perBatch)
              await engine.execute({ scope: 'bench/fresh', key: randomUUID(), fingerprint: null }, () => 'ok');
          }),
        );
        // µs per request: lower is faster.
        return Number(process.hrtime.bigint() - start) / 1000 / perBatch;
      };
    };
    const variants = [{ name: 'current', batch: await batchOf(current) }];
    if (baseline) variants.push({ name: 'baseline', batch: await batchOf(baseline) });
    const times = await interleave(variants, { rounds });
    const rps = (name: string) => 1e6 / median(times[name]!);
    return {
      concurrency,
      rounds,
      requestsPerSecond: { current: rps('current'), baseline: baseline ? rps('baseline') : null },
      ratio: baseline
        ? (() => {
            // Time ratio baseline / current = throughput ratio current / baseline.
            const [p25, p75] = ratioSpread(times, 'baseline', 'current');
            return { median: medianRatio(times, 'baseline', 'current'), p25, p75 };
          })()
        : null,
    };
  } finally {
    for (const database of databases) await database.close();
  }
}

export async function runRenewals({
  quick,
  baseline,
}: {
  quick: boolean;
  baseline?: string | undefined;
}): Promise<{ load: RenewalsResult[]; fresh: FreshPathResult }> {
  const load = [await renewalLoad(true, quick), await renewalLoad(false, quick)];
  const fresh = await freshPath(quick, baseline);
  return { load, fresh };
}

export function renderRenewals({ load, fresh }: { load: RenewalsResult[]; fresh: FreshPathResult }): string {
  const rows = load.map((result) => [
    result.groupCommit ? 'on' : 'off',
    String(result.handlers),
    `${result.leaseMs / 1000} s`,
    result.renewalsPerSecond.toFixed(0),
    result.writesPerSecond.toFixed(1),
    result.rowsPerWrite.toFixed(1),
  ]);
  const freshLine = fresh.ratio
    ? `Fresh path, ${fresh.concurrency} concurrent requests, short handlers: ${fresh.requestsPerSecond.current.toFixed(0)} req/s, baseline ${fresh.requestsPerSecond.baseline!.toFixed(0)} req/s: **${fresh.ratio.median.toFixed(2)}×** (${fresh.ratio.p25.toFixed(2)}–${fresh.ratio.p75.toFixed(2)}), ${fresh.rounds} rounds.`
    : `Fresh path, ${fresh.concurrency} concurrent requests, short handlers: ${fresh.requestsPerSecond.current.toFixed(0)} req/s (no --baseline given).`;
  return `### Lease renewals (E6), PostgreSQL, pool of 10\n\n${table(
    ['group commit', 'handlers in flight', 'lease', 'renewals/s', 'UPDATE statements/s', 'renewals per statement'],
    rows,
  )}\n\n${freshLine}`;
}

async function waitMix(waitMs: number, quick: boolean): Promise<WaitResult> {
  const clients = quick ? 100 : 400;
  const handlerMs = 300;
  const database = await openBenchPostgres({ max: 10 });
  try {
    const engine = createEngine({ store: createDrizzleStore(database.db), wait: waitMs });
    let executions = 0;
    let conflicts = 0;
    let replays = 0;
    let answers = 0;
    const ask = async (key: string) => {
      try {
        const result = await engine.execute({ scope: 'bench/wait', key, fingerprint: 'f' }, async () => {
          executions++;
          await sleep(handlerMs);
          return 'paid';
        });
        if (result.replayed) replays++;
      } catch (error) {
        if (!(error instanceof RequestInProgressError)) throw error;
        conflicts++;
      }
      answers++;
    };
    await Promise.all(
      Array.from({ length: clients }, async (_, i) => {
        await sleep((i * 7) % 500);
        const key = randomUUID();
        const first = ask(key);
        // The client's retry: it timed out before the answer, and tries again with the same key.
        await sleep(20 + Math.floor(Math.random() * (handlerMs - 40)));
        await Promise.all([first, ask(key)]);
      }),
    );
    return {
      transport: 'engine',
      waitMs,
      clients,
      answers,
      conflicts,
      conflictShare: conflicts / answers,
      replays,
      executions,
    };
  } finally {
    await database.close();
  }
}

/**
 * The same mix over HTTP, as the soak ran it: the payments example (`POST /v1/payments`, its
 * channel held 300 ms) on one PostgreSQL schema, one server without `IDEM_WAIT` and one with
 * `IDEM_WAIT=5s`, started side by side; executions are the servers' own `claimed` events.
 */
async function waitMixHttp(quick: boolean): Promise<WaitResult[]> {
  const { ExampleFleet } = await import('../test/reliability/support/example-server.ts');
  const { POSTGRES_SCHEMA } = await import('../test/reliability/support/databases.ts');
  const { restPayments } = await import('../test/reliability/support/payments.ts');
  const clients = quick ? 100 : 400;
  const handlerMs = 300;
  const database = await POSTGRES_SCHEMA.open();
  const fleet = new ExampleFleet();
  try {
    const servers = await Promise.all(
      [0, 5000].map((waitMs) =>
        fleet.start({
          databaseUrl: database.url,
          channelDelayMs: handlerMs,
          env: waitMs === 0 ? {} : { IDEM_WAIT: `${waitMs}ms` },
          name: waitMs === 0 ? 'without IDEM_WAIT' : 'IDEM_WAIT=5s',
        }),
      ),
    );
    const results: WaitResult[] = [];
    for (const [index, server] of servers.entries()) {
      let conflicts = 0;
      let replays = 0;
      let answers = 0;
      const keys: string[] = [];
      const ask = async (key: string) => {
        const answer = await restPayments.create(
          server.url,
          { amount: 100, currency: 'EUR' },
          { key, account: 'bench' },
        );
        answers++;
        if (answer.status === 409) conflicts++;
        else if (answer.replayed) replays++;
        else if (answer.status !== restPayments.created) throw new Error(`[bench] wait over HTTP: ${answer.status}`);
      };
      await Promise.all(
        Array.from({ length: clients }, async (_, i) => {
          await sleep((i * 7) % 500);
          const key = randomUUID();
          keys.push(key);
          const first = ask(key);
          await sleep(20 + Math.floor(Math.random() * (handlerMs - 40)));
          await Promise.all([first, ask(key)]);
        }),
      );
      const claimed = new Set(keys);
      results.push({
        transport: 'HTTP',
        waitMs: index === 0 ? 0 : 5000,
        clients,
        answers,
        conflicts,
        conflictShare: conflicts / answers,
        replays,
        executions: server.events.filter((event) => event.type === 'claimed' && claimed.has(event.key)).length,
      });
    }
    return results;
  } finally {
    await fleet.killAll();
    await database.close();
  }
}

export async function runWait({ quick }: { quick: boolean }): Promise<WaitResult[]> {
  return [await waitMix(0, quick), await waitMix(5000, quick), ...(await waitMixHttp(quick))];
}

export function renderWait(results: WaitResult[]): string {
  return `### A duplicate that waits (E3w), PostgreSQL, pool of 10, handler 300 ms\n\n${table(
    ['transport', 'wait', 'clients', 'answers', '409s', '409 share', 'replays', 'executions'],
    results.map((result) => [
      result.transport === 'engine' ? 'engine' : 'HTTP (example, REST)',
      result.waitMs === 0 ? 'none (E3)' : `${result.waitMs / 1000} s`,
      String(result.clients),
      String(result.answers),
      String(result.conflicts),
      `${(result.conflictShare * 100).toFixed(1)}%`,
      String(result.replays),
      String(result.executions),
    ]),
  )}`;
}

// `node --import tsx bench/renewals.ts [--quick] [--fresh-only] [baseline-dir]`: the two parts alone.
if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const quick = process.argv.includes('--quick');
  const baseline = process.argv.slice(2).find((arg) => !arg.startsWith('--'));
  if (process.argv.includes('--fresh-only')) {
    const fresh = await freshPath(quick, baseline);
    console.log(renderRenewals({ load: [], fresh }));
  } else {
    console.log(renderRenewals(await runRenewals({ quick, baseline })));
    console.log(`\n${renderWait(await runWait({ quick }))}`);
  }
}
