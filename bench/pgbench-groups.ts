/**
 * The grouped statements of the fresh path as pgbench scripts (issue 34): the store's claim
 * group (`INSERT … SELECT … FROM unnest(…) ON CONFLICT DO NOTHING RETURNING` with the read of
 * the rows it conflicted with) and its completion group (`UPDATE … FROM unnest(…)`), each for
 * `size` requests. The SQL is not written by hand: the store sends it, over a logging drizzle
 * instance on a fresh migrated schema, for 4 lone calls (one per lane) and then `size` queued
 * calls, which the batcher sends as one group; the texts and their parameters are captured, and
 * every key and token becomes `'<key>-' || :n`, so that each pgbench transaction claims and
 * completes `size` new keys (`:n` random per transaction).
 *
 *   node --import tsx bench/pgbench-groups.ts <dir> [size…]   # writes <dir>/group-<size>.sql
 */
import { randomUUID } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ClaimRequest } from '@idem/core/store';
import { createDrizzleStore } from '@idem/drizzle';
import { drizzle } from 'drizzle-orm/node-postgres';
import { openBenchPostgres } from './databases.ts';

/** Lanes of the batcher (group-commit.ts, DEFAULT_MAX_IN_FLIGHT): these calls go alone, the rest queue. */
const LANES = 4;

interface Captured {
  sql: string;
  params: unknown[];
}

/**
 * A parameter as pgbench script text: keys and tokens made unique per transaction, the rest
 * literal; an array parameter (the group's column, `unnest`) as an `ARRAY[…]` of its elements.
 */
function literal(value: unknown, renamed: Map<string, string>): string {
  if (Array.isArray(value)) return `ARRAY[${value.map((element) => literal(element, renamed)).join(', ')}]`;
  if (value === null) return 'NULL';
  if (typeof value === 'number') return String(value);
  if (typeof value !== 'string') throw new Error(`[bench] pgbench-groups: unexpected parameter ${String(value)}`);
  const name = renamed.get(value);
  if (name) return `('${name}-' || :n)`;
  return `'${value.replaceAll("'", "''")}'`;
}

function script(captured: Captured, renamed: Map<string, string>): string {
  // Highest placeholders first, so that $1 does not match the start of $12.
  let text = captured.sql;
  for (let i = captured.params.length; i >= 1; i--)
    text = text.replaceAll(`$${i}`, literal(captured.params[i - 1], renamed));
  // pgbench reads one statement per line unless it ends with a semicolon.
  return `${text.replaceAll('\n', ' ')};`;
}

export async function writeGroupScripts(dir: string, sizes: number[]): Promise<string[]> {
  const database = await openBenchPostgres();
  try {
    const captured: Captured[] = [];
    const db = drizzle({
      client: database.pool,
      logger: { logQuery: (sql: string, params: unknown[]) => void captured.push({ sql, params }) },
    });
    const store = createDrizzleStore(db);
    const files: string[] = [];
    for (const size of sizes) {
      captured.length = 0;
      const renamed = new Map<string, string>();
      const requests: ClaimRequest[] = Array.from({ length: LANES + size }, (_, i) => {
        const key = `k${size}x${i}-${randomUUID()}`;
        const token = `t${size}x${i}-${randomUUID()}`;
        renamed.set(key, `k${i}`);
        renamed.set(token, `t${i}`);
        return {
          scope: 'bench',
          key,
          fingerprint: 'fingerprint',
          token,
          leaseMs: 30_000,
          retentionMs: 86_400_000,
          expiredReuse: 'execute',
        };
      });
      await Promise.all(requests.map((request) => store.claim(request)));
      const outcome = { kind: 'success' as const, status: 200, body: '{"id":"charge"}' };
      await Promise.all(requests.map(({ scope, key, token }) => store.complete({ scope, key, token, outcome })));
      const claim = captured.find((c) => c.sql.includes('idem_claimed'));
      const complete = captured.find((c) => /^update/i.test(c.sql) && c.sql.includes('idem_v'));
      // One array parameter per column, each with one element per request of the group.
      const isGroup = (c: Captured | undefined) =>
        c !== undefined && c.params.length > 0 && c.params.every((p) => Array.isArray(p) && p.length === size);
      if (!isGroup(claim) || !isGroup(complete) || !claim || !complete)
        throw new Error(`[bench] pgbench-groups: the store did not send one group of ${size} claims and completions`);
      const file = join(dir, `group-${size}.sql`);
      writeFileSync(
        file,
        ['\\set n random(1, 9000000000000000000)', script(claim, renamed), script(complete, renamed), ''].join('\n'),
      );
      files.push(file);
    }
    return files;
  } finally {
    await database.close();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const [dir, ...sizes] = process.argv.slice(2);
  if (!dir) throw new Error('usage: pgbench-groups.ts <dir> [size…]');
  const files = await writeGroupScripts(dir, sizes.length > 0 ? sizes.map(Number) : [16, 64]);
  console.log(files.join('\n'));
}
