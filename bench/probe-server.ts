/**
 * Development (issue 34): the HTTP part's `idem engine` variant (and `bare`) in its own process,
 * with `@idem/core` and `@idem/drizzle` loaded from the `dist/` of any build (`root`), so that
 * two builds can be timed side by side (`bench/probe.ts`). On PostgreSQL it counts, at the pool,
 * what a fresh request spends: waits for a connection, statements by kind, time per statement,
 * rows per grouped statement; it answers `'stats'` over IPC with them.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import Database from 'better-sqlite3';
import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import { drizzle as drizzleSqlite } from 'drizzle-orm/better-sqlite3';
import pg from 'pg';
import { PoolProbe } from './pool-probe.ts';
import { charge, type Payment, serveParent } from './server-child.ts';

export interface ProbeConfig {
  /** A checkout whose packages/core and packages/drizzle are built. */
  root: string;
  variant: 'bare' | 'idem';
  /** `postgres://…` (search_path set) or a SQLite file path. */
  url: string;
  groupCommit?: boolean;
  /** Pool size on PostgreSQL. Defaults to 10, as `openDatabase`. */
  poolSize?: number;
  /** Wrap the store in `withLocalCache` (builds that have it). */
  localCache?: boolean;
  /** PostgreSQL: `postgres-js` instead of node-postgres (no pool statistics then). */
  postgresJs?: boolean;
  /** SQLite's `synchronous` pragma (a diagnostic: what the commits' fsyncs cost). Defaults to SQLite's, FULL. */
  synchronous?: string;
}

const config = JSON.parse(process.argv[2] ?? '{}') as ProbeConfig;
const load = (path: string) => import(pathToFileURL(join(config.root, path)).href);

type Reply = { status: number; body: unknown; headers?: Record<string, string> };
type Handle = (account: string, keyHeader: string | string[] | undefined, input: Payment) => Promise<Reply>;

let probe: PoolProbe | undefined;
let close = async () => {};
let handle: Handle = async (account, _key, input) => ({ status: 200, body: charge(account, input) });

if (config.variant === 'idem') {
  const core = (await load('packages/core/dist/index.js')) as typeof import('@idem/core');
  const { createDrizzleStore } = (await load('packages/drizzle/dist/index.js')) as typeof import('@idem/drizzle');
  let db: Parameters<typeof createDrizzleStore>[0];
  if (config.url.startsWith('postgres') && config.postgresJs) {
    const { default: postgres } = await import('postgres');
    const { drizzle: drizzlePostgresJs } = await import('drizzle-orm/postgres-js');
    const client = postgres(config.url, { max: config.poolSize ?? 10, onnotice: () => {} });
    db = drizzlePostgresJs(client);
    close = () => client.end();
  } else if (config.url.startsWith('postgres')) {
    const pool = new pg.Pool({ connectionString: config.url, max: config.poolSize ?? 10 });
    probe = new PoolProbe(pool);
    db = drizzlePg(pool);
    close = () => pool.end();
  } else {
    const sqlite = new Database(config.url);
    sqlite.pragma('journal_mode = WAL');
    sqlite.pragma('busy_timeout = 0');
    if (config.synchronous) sqlite.pragma(`synchronous = ${config.synchronous}`);
    db = drizzleSqlite(sqlite);
    close = async () => {
      sqlite.close();
    };
  }
  let store = createDrizzleStore(db, { groupCommit: config.groupCommit ?? true });
  if (config.localCache) {
    const { withLocalCache } = (await load('packages/core/dist/local-cache.js')) as typeof import('@idem/core/store');
    store = withLocalCache(store);
  }
  const engine = core.createEngine({ store });
  handle = async (account, keyHeader, input) => {
    try {
      const key = core.parseIdempotencyKey(keyHeader);
      if (key === undefined) throw new core.MissingKeyError();
      const result = await engine.execute(
        { scope: core.formatScope('payments.create', account), key, fingerprint: core.defaultFingerprint(input) },
        () => charge(account, input),
      );
      const headers = result.replayed ? { [core.IDEMPOTENT_REPLAYED_HEADER]: 'true' } : undefined;
      if (result.ok) return { status: 200, body: result.value, ...(headers ? { headers } : {}) };
      return { status: 500, body: { error: String(result.error) } };
    } catch (error) {
      if (error instanceof core.IdempotencyError)
        return { status: error.status, body: error.toProblem(), headers: error.headers() };
      throw error;
    }
  };
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function send(res: ServerResponse, { status, body, headers = {} }: Reply): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { ...headers, 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

const server = createServer((req, res) => {
  void (async () => {
    const input = JSON.parse(await readBody(req)) as Payment;
    try {
      send(res, await handle(String(req.headers.authorization), req.headers['idempotency-key'], input));
    } catch (error) {
      send(res, { status: 500, body: { error: error instanceof Error ? error.message : String(error) } });
    }
  })();
});
await serveParent(
  server,
  () => close(),
  () => probe?.take() ?? null,
);
