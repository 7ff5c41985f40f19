/**
 * Development (issue 34): fresh requests over HTTP against `bench/probe-server.ts`, one process
 * per target, interleaved in rounds, at the connection counts given; prints per target the median
 * req/s and p50/p99 over rounds, each round's ratio to the first target, and on PostgreSQL what
 * the pool saw (waits, statements per request, time per statement, rows per group).
 *
 *   node --import tsx bench/probe.ts [--connections 1,64] [--seconds 3] [--rounds 3] [--replay]
 *     [--cpu-prof <dir>] target…
 *
 * A target is `label=<variant>,<db>[,root=<dir>][,nogroup][,cache][,pool=<n>][,sync=<mode>][,socket=<dir>][,postgresjs]`: variant `bare` or
 * `idem`, db `pg` or `sqlite`; `root` a checkout whose packages/core and packages/drizzle are
 * built (default: this one); `sync` SQLite's `synchronous` pragma (a diagnostic); `socket` a PostgreSQL target over the Unix-domain socket in that directory; `postgresjs` a PostgreSQL target on postgres-js instead of node-postgres. `--cpu-prof` writes each server's V8 CPU profile there
 * (summarize with `bench/profile-summary.ts`).
 */
import { fork, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import autocannon from 'autocannon';
import { openBenchPostgres, openBenchSqlite, type BenchPostgres, type BenchSqlite } from './databases.ts';
import { median, percentile } from './measure.ts';
import type { PoolStats } from './pool-probe.ts';
import type { ProbeConfig } from './probe-server.ts';

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    connections: { type: 'string', default: '1,64' },
    seconds: { type: 'string', default: '3' },
    rounds: { type: 'string', default: '3' },
    replay: { type: 'boolean', default: false },
    'cpu-prof': { type: 'string' },
  },
});
const here = fileURLToPath(new URL('..', import.meta.url));
const connectionCounts = values.connections.split(',').map(Number);
const seconds = Number(values.seconds);
const rounds = Number(values.rounds);

interface Target {
  label: string;
  config: ProbeConfig;
  child: ChildProcess;
  port: number;
}

const databases: Array<BenchPostgres | BenchSqlite> = [];
const targets: Target[] = [];

async function start(spec: string): Promise<Target> {
  const [label, rest = ''] =
    spec.split('=', 2).length === 2
      ? [spec.slice(0, spec.indexOf('=')), spec.slice(spec.indexOf('=') + 1)]
      : [spec, spec];
  const parts = rest.split(',');
  const options = new Map(parts.slice(2).map((part) => [part.split('=')[0], part.split('=')[1] ?? 'true'] as const));
  let url = '';
  if (parts[1] === 'pg') {
    const database = await openBenchPostgres();
    databases.push(database);
    url = database.url;
    // `socket=<dir>`: the same database over its Unix-domain socket instead of TCP.
    if (options.has('socket')) {
      const parsed = new URL(url);
      parsed.searchParams.set('host', options.get('socket') ?? '/var/run/postgresql');
      url = parsed.toString().replace(`@${parsed.host}/`, '@/');
    }
  } else if (parts[1] === 'sqlite') {
    const database = await openBenchSqlite();
    databases.push(database);
    url = database.file;
  }
  const config: ProbeConfig = {
    root: resolve(options.get('root') ?? here),
    variant: parts[0] === 'bare' ? 'bare' : 'idem',
    url,
    groupCommit: !options.has('nogroup'),
    localCache: options.has('cache'),
    ...(options.has('pool') ? { poolSize: Number(options.get('pool')) } : {}),
    ...(options.has('sync') ? { synchronous: options.get('sync') } : {}),
    ...(options.has('postgresjs') ? { postgresJs: true } : {}),
  };
  const profile = values['cpu-prof']
    ? ['--cpu-prof', `--cpu-prof-dir=${resolve(values['cpu-prof'], label.replace(/\W+/g, '_'))}`]
    : [];
  const child = fork(fileURLToPath(new URL('./probe-server.ts', import.meta.url)), [JSON.stringify(config)], {
    execArgv: ['--import', 'tsx', ...profile],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const port = await new Promise<number>((resolvePort, reject) => {
    child.once('message', (message) => resolvePort((message as { port: number }).port));
    child.once('exit', (code) => reject(new Error(`[probe] ${label} exited with ${code}`)));
  });
  return { label, config, child, port };
}

function stats(target: Target): Promise<{ pool: PoolStats | null; cpuMicros: number }> {
  return new Promise((resolveStats) => {
    target.child.once('message', (message) => {
      const { stats: pool, cpuMicros } = message as { stats: PoolStats | null; cpuMicros: number };
      resolveStats({ pool, cpuMicros });
    });
    target.child.send('stats');
  });
}

const tag = randomBytes(4).toString('hex');
let counter = 0;
async function load(target: Target, connections: number, duration: number, key: () => string) {
  const latencies: number[] = [];
  const result = await new Promise<autocannon.Result>((resolveRun, reject) => {
    const instance = autocannon(
      {
        url: `http://127.0.0.1:${target.port}`,
        connections,
        duration,
        requests: [
          {
            method: 'POST',
            path: '/charge',
            headers: { 'content-type': 'application/json', authorization: 'Bearer acct_42' },
            body: JSON.stringify({ amount: 1200, currency: 'EUR' }),
            setupRequest: (request) => ({ ...request, headers: { ...request.headers, 'idempotency-key': key() } }),
          },
        ],
      },
      (error, done) => (error ? reject(error) : resolveRun(done)),
    );
    instance.on('response', (_client, status, _bytes, time) => {
      if (status >= 200 && status < 300) latencies.push(time);
    });
  });
  return {
    rps: result.requests.total / result.duration,
    requests: result.requests.total,
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    failed: result.non2xx + result.errors,
  };
}

try {
  for (const spec of positionals) targets.push(await start(spec));
  for (const connections of connectionCounts) {
    const samples = new Map<
      string,
      Array<Awaited<ReturnType<typeof load>> & { pool: PoolStats | null; cpuUs: number }>
    >();
    for (let round = 0; round < rounds; round++) {
      const order = targets.map((_, i) => targets[(i + round) % targets.length] as Target);
      for (const target of order) {
        const fixed = `${tag}-fixed-${connections}-${round}`;
        const key = values.replay ? () => fixed : () => `${tag}-${(counter++).toString(36)}`;
        await load(target, connections, 1, key);
        await stats(target);
        const sample = await load(target, connections, seconds, key);
        const list = samples.get(target.label) ?? [];
        const { pool, cpuMicros } = await stats(target);
        list.push({ ...sample, pool, cpuUs: cpuMicros / Math.max(1, sample.requests) });
        samples.set(target.label, list);
      }
    }
    const base = samples.get(targets[0]?.label ?? '') ?? [];
    console.log(
      `\n${connections} connection(s), ${values.replay ? 'replay' : 'fresh'}, ${rounds} rounds × ${seconds} s:`,
    );
    console.log('| target | req/s | p50 ms | p99 ms | × first (per round) | server CPU µs/request | failed |');
    console.log('| --- | --- | --- | --- | --- | --- | --- |');
    for (const target of targets) {
      const list = samples.get(target.label) ?? [];
      const ratios = list.map((s, i) => s.rps / (base[i]?.rps ?? Number.NaN));
      console.log(
        `| ${target.label} | ${median(list.map((s) => s.rps)).toFixed(0)} | ${median(list.map((s) => s.p50)).toFixed(2)} | ${median(list.map((s) => s.p99)).toFixed(2)} | ${median(ratios).toFixed(2)}× (${ratios.map((r) => r.toFixed(2)).join(', ')}) | ${median(list.map((s) => s.cpuUs)).toFixed(0)} (${list.map((s) => s.cpuUs.toFixed(0)).join(', ')}) | ${list.reduce((n, s) => n + s.failed, 0)} |`,
      );
    }
    for (const target of targets) {
      const last = samples.get(target.label)?.at(-1);
      if (!last?.pool) continue;
      console.log(`\n${target.label}, last round at the pool (${last.requests} requests):`);
      console.log('| statement | per request | wait p50 / p90 ms | run p50 / p90 ms | rows p50 / p90 / max |');
      console.log('| --- | --- | --- | --- | --- |');
      for (const [kind, s] of Object.entries(last.pool))
        console.log(
          `| ${kind} | ${(s.count / last.requests).toFixed(3)} | ${s.waitP50Ms.toFixed(2)} / ${s.waitP90Ms.toFixed(2)} | ${s.runP50Ms.toFixed(2)} / ${s.runP90Ms.toFixed(2)} | ${s.rowsP50 === undefined ? '' : `${s.rowsP50} / ${s.rowsP90} / ${s.rowsMax}`} |`,
        );
    }
  }
} finally {
  await Promise.all(
    targets.map(
      ({ child }) =>
        new Promise<void>((done) => {
          if (child.exitCode !== null) return done();
          child.once('exit', () => done());
          child.send('stop');
        }),
    ),
  );
  for (const database of databases) await database.close();
}
