/**
 * Part 2, end to end over HTTP on loopback: autocannon against each variant of
 * bench/http-servers.ts, each in its own process, with 1 and 64 connections. Fresh runs send a
 * new `Idempotency-Key` per request; replay runs send one key, stored before the run. Variants
 * are interleaved in rounds; req/s is reported with its ratio to the bare handler of the same
 * round (median over rounds).
 */
import { resolve } from 'node:path';
import { fork, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import { createClient } from '@redis/client';
import { openBenchPostgres, openBenchSqlite, REDIS_URL, type BenchPostgres, type BenchSqlite } from './databases.ts';
import { cpuPerRequest, cpuSnapshot, type CpuPerRequest } from './machine-cpu.ts';
import { median, percentile } from './measure.ts';
import { HTTP_VARIANTS, type HttpVariant, type ServerConfig } from './http-servers.ts';

const PAYMENT = JSON.stringify({ amount: 1200, currency: 'EUR' });
const HEADERS = { 'content-type': 'application/json', authorization: 'Bearer acct_42' };
/** Variants whose replay is measured (bare has nothing to replay; tRPC's replay is the engine's). */
const REPLAY_VARIANTS: readonly HttpVariant[] = [
  'idem engine, SQLite',
  'idem engine, SQLite, groupCommit: false',
  'idem engine, PostgreSQL',
  'idem engine, PostgreSQL, groupCommit: false',
  'idem engine, PostgreSQL, local cache',
  'powertools, Redis',
  'node-idempotency, memory',
  'node-idempotency, Redis',
  'hono + idem, SQLite',
  'hono + idem, PostgreSQL',
];
/** What each example row with idem is also compared with: the same route without idem, same database. */
const ROUTE_BARE: Partial<Record<HttpVariant, HttpVariant>> = {
  'tRPC + idem, SQLite': 'tRPC bare, SQLite',
  'tRPC + idem, PostgreSQL': 'tRPC bare, PostgreSQL',
  'hono + idem, SQLite': 'hono bare, SQLite',
  'hono + idem, PostgreSQL': 'hono bare, PostgreSQL',
  'tRPC + idem, PostgreSQL, atomic': 'tRPC bare, PostgreSQL',
  'hono + idem, PostgreSQL, atomic': 'hono bare, PostgreSQL',
};

export interface HttpOptions {
  quick: boolean;
}

export interface HttpRow {
  variant: HttpVariant;
  mode: 'fresh' | 'replay';
  connections: number;
  /** Medians over rounds. */
  requestsPerSecond: number;
  p50Ms: number;
  p99Ms: number;
  /** Median over rounds of the server process's CPU time (user + system) per answered request, µs. */
  serverCpuMicros: number;
  /**
   * Medians over rounds of the whole machine's CPU per answered request and of its database
   * processes' and the load generator's shares (`machine-cpu.ts`); absent off Linux.
   */
  cpu?: CpuPerRequest;
  /** Median over rounds of this row's req/s over the bare handler's in the same round. */
  ratioToBare: number;
  /** tRPC + idem and hono + idem rows, fresh keys: the same ratio against the same route without idem. */
  ratioToRouteBare?: number;
  /** Summed over rounds: any of these means the row did not measure what it says. */
  non2xx: number;
  errors: number;
}

export interface HttpResult {
  durationSeconds: number;
  warmupSeconds: number;
  rounds: number;
  rows: HttpRow[];
  /** The first fresh and repeated request of each variant, as a check that it replays. */
  checks: Record<string, string>;
}

interface Sample {
  requestsPerSecond: number;
  p50Ms: number;
  p99Ms: number;
  serverCpuMicros: number;
  cpu: CpuPerRequest | undefined;
  non2xx: number;
  errors: number;
}

interface RunningServer {
  variant: HttpVariant;
  child: ChildProcess;
  port: number;
}

/**
 * Development only: `BENCH_HTTP_VARIANTS='idem engine, PostgreSQL|powertools, Redis'` runs those
 * variants (and `bare`, every ratio's base, and a route's variant without idem) instead of all of them.
 */
function chosenVariants(): readonly HttpVariant[] {
  const chosen = process.env.BENCH_HTTP_VARIANTS?.split('|').map((name) => name.trim());
  if (!chosen) return HTTP_VARIANTS;
  const unknown = chosen.filter((name) => !(HTTP_VARIANTS as readonly string[]).includes(name));
  if (unknown.length > 0) throw new Error(`[bench] unknown HTTP variant(s): ${unknown.join(', ')}`);
  // A row with idem is also divided by its route without idem: that one runs too.
  const routeBares = chosen.flatMap((name) => ROUTE_BARE[name as HttpVariant] ?? []);
  return HTTP_VARIANTS.filter(
    (variant) => variant === 'bare' || chosen.includes(variant) || routeBares.includes(variant),
  );
}

export async function runHttp({ quick }: HttpOptions): Promise<HttpResult> {
  const durationSeconds = quick ? 2 : 3;
  const warmupSeconds = 1;
  const rounds = quick ? 1 : 3;
  const connectionCounts = [1, 64];
  const runTag = randomBytes(4).toString('hex');
  const redisPrefix = `idem-bench:${runTag}:`;

  const databases: Array<BenchSqlite | BenchPostgres> = [];
  const servers: RunningServer[] = [];
  try {
    for (const variant of chosenVariants()) {
      const sqlite = variant.includes('SQLite') ? await openBenchSqlite() : undefined;
      const postgres = variant.includes('PostgreSQL') ? await openBenchPostgres() : undefined;
      if (sqlite) databases.push(sqlite);
      if (postgres) databases.push(postgres);
      const config: ServerConfig = {
        variant,
        sqliteUrl: sqlite ? `file:${sqlite.file}` : '',
        postgresUrl: postgres?.url ?? '',
        redisUrl: REDIS_URL,
        redisPrefix,
      };
      servers.push(await startServer(config));
    }

    const checks: Record<string, string> = {};
    for (const server of servers) checks[server.variant] = await checkReplay(server, `${runTag}-check`);

    const samples = new Map<string, Sample[]>();
    const sampleKey = (variant: HttpVariant, mode: string, connections: number) => `${variant}|${mode}|${connections}`;
    let keyCounter = 0;
    for (let round = 0; round < rounds; round++) {
      for (const connections of connectionCounts) {
        // Rotate the order each round so that no variant always runs right after the same one.
        const order = servers.map((_, i) => servers[(i + round * 3) % servers.length]!);
        for (const server of order) {
          const prefix = `${runTag}-${round}-${connections}-${HTTP_VARIANTS.indexOf(server.variant)}`;
          const fresh = () => `${prefix}-${(keyCounter++).toString(36)}`;
          await load(server, connections, warmupSeconds, fresh);
          push(
            samples,
            sampleKey(server.variant, 'fresh', connections),
            await load(server, connections, durationSeconds, fresh),
          );
          if (REPLAY_VARIANTS.includes(server.variant)) {
            const fixed = `${prefix}-replay`;
            await post(server, fixed);
            push(
              samples,
              sampleKey(server.variant, 'replay', connections),
              await load(server, connections, durationSeconds, () => fixed),
            );
          }
        }
      }
    }

    const rows: HttpRow[] = [];
    for (const connections of connectionCounts) {
      const bare = samples.get(sampleKey('bare', 'fresh', connections))!;
      for (const mode of ['fresh', 'replay'] as const) {
        for (const variant of HTTP_VARIANTS) {
          const list = samples.get(sampleKey(variant, mode, connections));
          if (!list) continue;
          const row: HttpRow = {
            variant,
            mode,
            connections,
            requestsPerSecond: median(list.map((s) => s.requestsPerSecond)),
            p50Ms: median(list.map((s) => s.p50Ms)),
            p99Ms: median(list.map((s) => s.p99Ms)),
            serverCpuMicros: median(list.map((s) => s.serverCpuMicros)),
            ...medianCpu(list),
            ratioToBare: median(list.map((s, round) => s.requestsPerSecond / bare[round]!.requestsPerSecond)),
            non2xx: list.reduce((sum, s) => sum + s.non2xx, 0),
            errors: list.reduce((sum, s) => sum + s.errors, 0),
          };
          const routeBare = ROUTE_BARE[variant];
          if (routeBare && mode === 'fresh') {
            const base = samples.get(sampleKey(routeBare, 'fresh', connections))!;
            row.ratioToRouteBare = median(list.map((s, round) => s.requestsPerSecond / base[round]!.requestsPerSecond));
          }
          rows.push(row);
        }
      }
    }
    return { durationSeconds, warmupSeconds, rounds, rows, checks };
  } finally {
    await Promise.all(servers.map(stopServer));
    for (const database of databases) await database.close();
    await deleteRedisKeys(redisPrefix);
  }
}

function medianCpu(list: readonly Sample[]): { cpu?: CpuPerRequest } {
  const measured = list.flatMap((s) => (s.cpu ? [s.cpu] : []));
  if (measured.length === 0) return {};
  const of = (field: keyof CpuPerRequest) => median(measured.map((c) => c[field]));
  return {
    cpu: {
      machineCpuMicros: of('machineCpuMicros'),
      databaseCpuMicros: of('databaseCpuMicros'),
      loadCpuMicros: of('loadCpuMicros'),
    },
  };
}

function push(samples: Map<string, Sample[]>, key: string, sample: Sample): void {
  const list = samples.get(key) ?? [];
  list.push(sample);
  samples.set(key, list);
}

function pathOf(variant: HttpVariant): string {
  if (variant.startsWith('tRPC')) return '/trpc/payments.create';
  return variant.startsWith('hono') ? '/v1/payments' : '/charge';
}

async function load(
  server: RunningServer,
  connections: number,
  seconds: number,
  nextKey: () => string,
): Promise<Sample> {
  // autocannon's histogram keeps whole milliseconds; loopback latencies need the fractions.
  const latencies: number[] = [];
  const cpuBefore = await serverCpu(server);
  const machineBefore = cpuSnapshot();
  const result = await new Promise<autocannon.Result>((resolve, reject) => {
    const instance = autocannon(
      {
        url: `http://127.0.0.1:${server.port}`,
        connections,
        duration: seconds,
        requests: [
          {
            method: 'POST',
            path: pathOf(server.variant),
            headers: HEADERS,
            body: PAYMENT,
            setupRequest: (request) => ({ ...request, headers: { ...request.headers, 'idempotency-key': nextKey() } }),
          },
        ],
      },
      (error, done) => (error ? reject(error) : resolve(done)),
    );
    instance.on('response', (_client, statusCode, _bytes, responseTime) => {
      if (statusCode >= 200 && statusCode < 300) latencies.push(responseTime);
    });
  });
  const machineAfter = cpuSnapshot();
  const cpuMicros = (await serverCpu(server)) - cpuBefore;
  return {
    requestsPerSecond: result.requests.total / result.duration,
    serverCpuMicros: cpuMicros / Math.max(1, result.requests.total),
    cpu: cpuPerRequest(machineBefore, machineAfter, result.requests.total),
    p50Ms: percentile(latencies, 50),
    p99Ms: percentile(latencies, 99),
    non2xx: result.non2xx,
    errors: result.errors,
  };
}

/** The server process's CPU time so far (user + system), µs. */
function serverCpu({ child }: RunningServer): Promise<number> {
  return new Promise((resolve) => {
    const listener = (message: unknown) => {
      if (typeof message !== 'object' || message === null || !('cpuMicros' in message)) return;
      child.off('message', listener);
      resolve(Number(message.cpuMicros));
    };
    child.on('message', listener);
    child.send('cpu');
  });
}

/** One request and the same again: answers `200 → 200 replayed` when the variant replays as it should. */
async function checkReplay(server: RunningServer, key: string): Promise<string> {
  const first = await post(server, key);
  const firstBody = await first.text();
  const second = await post(server, key);
  const secondBody = await second.text();
  const replayed = second.headers.get('idempotent-replayed') === 'true' ? ' replayed' : '';
  const same = firstBody === secondBody ? 'same body' : 'different body';
  return `${first.status} → ${second.status}${replayed}, ${same}`;
}

function post(server: RunningServer, key: string): Promise<Response> {
  return fetch(`http://127.0.0.1:${server.port}${pathOf(server.variant)}`, {
    method: 'POST',
    headers: { ...HEADERS, 'idempotency-key': key },
    body: PAYMENT,
  });
}

const SERVER_ENTRY = fileURLToPath(new URL('./http-server-process.ts', import.meta.url));

/**
 * Development only: `BENCH_CPU_PROF=<dir>` writes each server's V8 CPU profile under
 * `<dir>/<variant>/` (summarize with `bench/profile-summary.ts`).
 */
function cpuProfileArgs(variant: string): string[] {
  const dir = process.env.BENCH_CPU_PROF;
  return dir ? ['--cpu-prof', `--cpu-prof-dir=${resolve(dir, variant.replace(/\W+/g, '_'))}`] : [];
}

function startServer(config: ServerConfig): Promise<RunningServer> {
  const child = fork(SERVER_ENTRY, [JSON.stringify(config)], {
    execArgv: ['--import', 'tsx', ...cpuProfileArgs(config.variant)],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`[bench] ${config.variant} did not start within 30 s`)), 30_000);
    child.once('message', (message) => {
      clearTimeout(timer);
      resolve({ variant: config.variant, child, port: (message as { port: number }).port });
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`[bench] ${config.variant} exited with ${code} before listening`));
    });
  });
}

function stopServer({ child }: RunningServer): Promise<void> {
  if (child.exitCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      resolve();
    }, 10_000);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
    child.send('stop');
  });
}

/** Deletes the keys this run wrote (SCAN + DEL on its own prefix; never FLUSHALL). */
async function deleteRedisKeys(prefix: string): Promise<void> {
  const client = await createClient({ url: REDIS_URL }).connect();
  try {
    let batch: string[] = [];
    for await (const keys of client.scanIterator({ MATCH: `${prefix}*`, COUNT: 1000 })) {
      batch.push(...keys);
      if (batch.length >= 1000) {
        await client.del(batch);
        batch = [];
      }
    }
    if (batch.length > 0) await client.del(batch);
  } finally {
    await client.quit();
  }
}
