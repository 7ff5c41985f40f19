#!/usr/bin/env node
/**
 * `npm run test:loaded`: the timing-sensitive test files, run while CPU-bound processes
 * (`for (;;) {}`, 16 by default) compete with them for the machine's cores. A test that waits
 * on the client's clock for a server-side deadline, or races a fixed sleep against real work,
 * fails here where it passes on an idle machine.
 *
 *   npm run test:loaded                                   # the files below, 16 burners
 *   npm run test:loaded -- packages/trpc/test/link.test.ts   # other files (any vitest arguments)
 *   IDEM_BURNERS=8 npm run test:loaded
 *
 * The burners are always ended: when vitest exits, on SIGINT/SIGTERM/SIGHUP, and on any error
 * of this script. Should this script be killed outright (SIGKILL), each burner notices that its
 * parent is gone, or that its hour is up, and exits by itself.
 */
import { spawn } from 'node:child_process';
import { availableParallelism, loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const VITEST = fileURLToPath(new URL('../node_modules/vitest/vitest.mjs', import.meta.url));

/** The files whose outcome depended on an idle machine (issue 17), and the others that wait on deadlines. */
const TIMING_SENSITIVE = [
  'examples/payments/test/demo.test.ts',
  'examples/payments/test/contract.test.ts',
  'examples/payments/test/downstream.test.ts',
  'packages/trpc/test/link.test.ts',
  'packages/envelop/test/client.test.ts',
  'packages/core/test/memory-store.test.ts',
  'packages/drizzle/test/sqlite.conformance.test.ts',
  'packages/drizzle/test/postgres.conformance.test.ts',
  'packages/drizzle/test/sqlite.store.test.ts',
  'packages/drizzle/test/postgres.store.test.ts',
  'packages/drizzle/test/race.test.ts',
  'packages/drizzle/test/cli.test.ts',
  'packages/drizzle/test/atomic.test.ts',
  'test/reliability/crash.test.ts',
  'test/reliability/faults.test.ts',
  'test/reliability/atomic.test.ts',
  'test/reliability/races.test.ts',
  'test/reliability/security.test.ts',
];

const BURNERS = Number(process.env.IDEM_BURNERS ?? 16);
/** A burner gives up on its own after this long, whatever happens to its parent. */
const BURNER_LIFETIME_MS = 60 * 60 * 1000;

if (!Number.isInteger(BURNERS) || BURNERS < 0) {
  console.error(`[test:loaded] IDEM_BURNERS must be a whole number, got "${process.env.IDEM_BURNERS}"`);
  process.exit(2);
}

// Busy from the first instruction; every 2^26 rounds it checks that its parent still runs.
const burn = `const parent = ${process.pid}, until = Date.now() + ${BURNER_LIFETIME_MS};
for (let i = 1; ; i++) if ((i & 0x3ffffff) === 0 && (process.ppid !== parent || Date.now() > until)) process.exit(0);`;

const burners = [];
let vitest;

/** Kills every burner still running (synchronous: safe in an `exit` handler). */
function stopBurners() {
  for (const burner of burners.splice(0)) {
    if (burner.exitCode === null && burner.signalCode === null) burner.kill('SIGKILL');
  }
}

process.on('exit', stopBurners);
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(signal, () => {
    console.error(`[test:loaded] ${signal}: stopping vitest and the burners`);
    stopBurners();
    vitest?.kill(signal);
    process.exit(128 + ({ SIGHUP: 1, SIGINT: 2, SIGTERM: 15 }[signal] ?? 0));
  });
}
process.on('uncaughtException', (error) => {
  console.error(`[test:loaded] ${error instanceof Error ? error.stack : String(error)}`);
  stopBurners();
  process.exit(1);
});

for (let i = 0; i < BURNERS; i++) burners.push(spawn(process.execPath, ['-e', burn], { stdio: 'ignore' }));

const args = process.argv.slice(2);
const files = args.length > 0 ? args : TIMING_SENSITIVE;
console.log(
  `[test:loaded] ${BURNERS} CPU-bound processes on ${availableParallelism()} cores; vitest run ${args.length > 0 ? args.join(' ') : `${files.length} timing-sensitive files`}`,
);
const started = Date.now();
vitest = spawn(process.execPath, [VITEST, 'run', ...files], { cwd: ROOT, stdio: 'inherit' });
const code = await new Promise((resolve) =>
  vitest.once('exit', (exitCode, signal) => resolve(exitCode ?? (signal ? 1 : 0))),
);
const load = loadavg()[0].toFixed(1);
stopBurners();
console.log(
  `[test:loaded] vitest exited with ${code} after ${Math.round((Date.now() - started) / 1000)} s (load average ${load} at the end)`,
);
process.exit(code);
