/**
 * Development aid for choosing group commit's lanes (DEFAULT_MAX_IN_FLIGHT in
 * packages/drizzle/src/group-commit.ts): 64 concurrent clients, each a loop of fresh claim +
 * completion through the store on node-postgres (a pool of 10), for `seconds`. Prints one JSON
 * line { groupCommit, pairs, pairsPerSecond }. Run: `node --import tsx bench/group-lanes.ts [off]`.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { drizzle } from 'drizzle-orm/node-postgres';
import { createDrizzleStore, migrate } from '@idem/drizzle';

const url = process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/test';
const groupCommit = process.argv[2] !== 'off';
const seconds = Number(process.env.SECONDS_PER_RUN ?? 3);
const clients = Number(process.env.CLIENTS ?? 64);
const schema = `idem_lanes_${randomBytes(4).toString('hex')}`;
const admin = new pg.Client({ connectionString: url });
await admin.connect();
await admin.query(`CREATE SCHEMA ${schema}`);
const withPath = new URL(url);
withPath.searchParams.set('options', `-c search_path=${schema}`);
const pool = new pg.Pool({ connectionString: withPath.toString(), max: 10 });
try {
  const db = drizzle({ client: pool });
  await migrate(db);
  const store = createDrizzleStore(db, { groupCommit });
  const pair = async () => {
    const request = {
      scope: 's',
      key: randomUUID(),
      fingerprint: 'f',
      token: randomUUID(),
      leaseMs: 30_000,
      retentionMs: 3_600_000,
      expiredReuse: 'execute' as const,
    };
    await store.claim(request);
    await store.complete({
      scope: 's',
      key: request.key,
      token: request.token,
      outcome: { kind: 'success', status: 200, body: '{}' },
    });
  };
  const warmUntil = Date.now() + 500;
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (Date.now() < warmUntil) await pair();
    }),
  );
  let pairs = 0;
  const start = performance.now();
  const until = Date.now() + seconds * 1000;
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (Date.now() < until) {
        await pair();
        pairs++;
      }
    }),
  );
  const elapsed = (performance.now() - start) / 1000;
  console.log(JSON.stringify({ groupCommit, pairs, pairsPerSecond: Math.round(pairs / elapsed) }));
} finally {
  await pool.end();
  await admin.query(`DROP SCHEMA ${schema} CASCADE`);
  await admin.end();
}
