/**
 * One contender of the cross-process group race (group-race.test.ts). Run as
 * `node --import tsx group-race-child.ts '<json GroupRaceConfig>'`: opens its own store
 * (group commit on), prints `ready`, and on `go` (stdin) claims every key `rounds` times at once,
 * so that its claims go in groups, with duplicates inside them; then completes what it won and
 * prints one JSON line of what it saw.
 */
import { randomUUID } from 'node:crypto';
import { createInterface } from 'node:readline';
import { openChildStore, type ChildTarget } from './drivers.ts';

export interface GroupRaceConfig {
  target: ChildTarget;
  scope: string;
  keys: string[];
  rounds: number;
}

export interface GroupRaceReport {
  /** Key → the token of each claim this process won. */
  won: Record<string, string[]>;
  /** Key → the owner each claim that found the key saw. */
  seen: Record<string, string[]>;
  completed: number;
  errors: string[];
}

const config = JSON.parse(process.argv[2] ?? '{}') as GroupRaceConfig;
const { store, close } = await openChildStore(config.target);
await store.ping();
const lines = createInterface({ input: process.stdin });
await new Promise<void>((resolve) => {
  process.stdout.write('ready\n');
  lines.on('line', (line) => line === 'go' && resolve());
});
lines.close();

const report: GroupRaceReport = { won: {}, seen: {}, completed: 0, errors: [] };
const claims = Array.from({ length: config.rounds }, () => config.keys).flat();
await Promise.all(
  claims.map(async (key) => {
    try {
      const token = randomUUID();
      const result = await store.claim({
        scope: config.scope,
        key,
        fingerprint: 'race',
        token,
        leaseMs: 60_000,
        retentionMs: 60_000,
        expiredReuse: 'execute',
      });
      if (result.outcome === 'claimed') {
        (report.won[key] ??= []).push(token);
        const done = await store.complete({
          scope: config.scope,
          key,
          token,
          outcome: { kind: 'success', status: 200, body: JSON.stringify({ token }) },
        });
        if (done) report.completed++;
      } else (report.seen[key] ??= []).push(result.record.token);
    } catch (error) {
      report.errors.push(String(error));
    }
  }),
);
process.stdout.write(`${JSON.stringify(report)}\n`);
await close();
