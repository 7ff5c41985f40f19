/**
 * One contender of the cross-process race (race.test.ts). Run as
 * `node --import tsx race-child.ts '<json RaceChildConfig>'`: opens its own connection(s),
 * prints `ready`, and on `go` (stdin) fires a burst of claims and prints `started`; on `finish`
 * it sends the rest, then prints one JSON line of what it saw. The parent says `finish` once
 * every contender has started, so each one is still claiming while all the others are, however
 * the machine schedules them.
 */
import { randomUUID } from 'node:crypto';
import { createInterface } from 'node:readline';
import { openChildStore, type ChildTarget } from './drivers.ts';

export interface RaceChildConfig {
  /** The driver and database this process opens (drivers.ts). */
  target: ChildTarget;
  scope: string;
  key: string;
  claims: number;
  /** The store's group commit (default on). */
  groupCommit?: boolean;
}

export interface RaceChildReport {
  claimed: number;
  existing: number;
  /** Tokens owning the record as each claim saw it (the winner's own, or the one it found). */
  owners: string[];
  generations: number[];
  errors: string[];
}

/** Over how long each process sends its claims after `finish`. */
const SPREAD_MS = 100;

const config = JSON.parse(process.argv[2] ?? '{}') as RaceChildConfig;
const { store, close } = await openChildStore(config.target, { groupCommit: config.groupCommit });
await store.ping();

const lines = createInterface({ input: process.stdin });
const received: string[] = [];
let arrived: (() => void) | undefined;
lines.on('line', (line) => {
  received.push(line);
  arrived?.();
});
/** Resolves once the parent has written `word` on its own line. */
const told = (word: string) =>
  new Promise<void>((resolve) => {
    const check = () => (received.includes(word) ? resolve() : void (arrived = check));
    check();
  });
process.stdout.write('ready\n');
await told('go');

const report: RaceChildReport = { claimed: 0, existing: 0, owners: [], generations: [], errors: [] };
const claim = async () => {
  try {
    const result = await store.claim({
      scope: config.scope,
      key: config.key,
      fingerprint: 'race',
      token: randomUUID(),
      leaseMs: 60_000,
      retentionMs: 60_000,
      expiredReuse: 'execute',
    });
    report[result.outcome]++;
    report.owners.push(result.record.token);
    report.generations.push(result.record.generation);
  } catch (error) {
    report.errors.push(String(error));
  }
};
// A burst of claims from every process on `go`, the rest after `finish`, spread over SPREAD_MS:
// however far the scheduler (or SQLite's single writer) lets one process run ahead, it is still
// claiming once all the others have started.
const burst = Math.ceil(config.claims / 4);
const first = Array.from({ length: burst }, claim);
process.stdout.write('started\n');
await told('finish');
lines.close();
const step = SPREAD_MS / (config.claims - burst + 1);
await Promise.all([
  ...first,
  ...Array.from({ length: config.claims - burst }, (_, i) =>
    new Promise((resolve) => setTimeout(resolve, (i + 1) * step)).then(claim),
  ),
]);
await close();
process.stdout.write(`${JSON.stringify(report)}\n`);
