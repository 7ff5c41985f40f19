/**
 * The `idem` bin, run as a child process from the repository root against a SQLite file,
 * a fresh PostgreSQL schema and a fresh MySQL database: the same commands and assertions on both (A1, R3, R4), and the
 * one-line error contract (exit 2 for usage, 1 for failures, never a stack trace).
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createPolicyDocument } from '@idem/core';
import type { TimelineEntry } from '@idem/core/store';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createDrizzleStore, type DrizzleDatabase, type DrizzleStore } from '../src/index.ts';
import { expectOneLineError, idemCli } from './cli-run.ts';
import { isServerReachable, openPostgresTarget, postgresRequired } from './pg-target.ts';
import { openSqliteConnection } from './sqlite-target.ts';
import { mysqlSuitesRun, openMysqlTarget } from './mysql-target.ts';

const UNREACHABLE = 'postgres://postgres@127.0.0.1:1/x';
/** A body that must never reach the terminal (K5). */
const SECRET = 'card-4242-4242';

/** Runs the bin from the repository root. */
const idem = (args: string[], databaseUrl: string | undefined) => idemCli(args, databaseUrl);

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

// Every test starts the CLI, some several times: on a loaded machine one start takes
// 10 s or more. The bounds are for a hung process, not speed checks.
vi.setConfig({ testTimeout: 120_000 });

interface CliTarget {
  /** DATABASE_URL for the child processes. */
  url: string;
  /** `--driver`, when not the first installed driver of the dialect. */
  driver?: string;
  /** The same database, in this process, to create records through the store API. */
  db: DrizzleDatabase;
  /** How the CLI names it in `migrated …`. */
  description: RegExp;
  close(): Promise<void>;
}

async function openSqliteCliTarget(driver?: 'libsql'): Promise<CliTarget> {
  const directory = mkdtempSync(join(tmpdir(), 'idem-cli-'));
  // A directory that does not exist yet: `migrate` creates it.
  const file = join(directory, 'nested', 'idem.db');
  let connection: ReturnType<typeof openSqliteConnection> | undefined;
  return {
    url: `file:${file}`,
    driver,
    get db() {
      // Opened after `migrate` created the file.
      connection ??= openSqliteConnection(file);
      return connection.db;
    },
    description: new RegExp(`^migrated file:${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\n$`),
    async close() {
      connection?.client.close();
      rmSync(directory, { recursive: true, force: true });
    },
  };
}

async function openPostgresCliTarget(driver?: 'postgres-js'): Promise<CliTarget> {
  const target = await openPostgresTarget({ max: 4, schemaPrefix: 'idem_cli' });
  if (target.kind === 'pglite' || !target.url) {
    await target.close();
    throw new Error('unreachable: the PostgreSQL half is skipped when only PGlite is available');
  }
  return {
    url: target.url,
    driver,
    db: target.db,
    description: new RegExp(`^migrated postgres://.*search_path=${target.schema}\n$`),
    close: () => target.close(),
  };
}

async function openMysqlCliTarget(): Promise<CliTarget> {
  const target = await openMysqlTarget({ connectionLimit: 4, prefix: 'idem_cli' });
  return {
    url: target.url,
    db: target.db,
    description: new RegExp(`^migrated mysql://root@[^/]+/${target.database}\n$`),
    close: () => target.close(),
  };
}

const mysqlServer = await mysqlSuitesRun();

// A child process cannot share the in-process PGlite fallback: without a server the
// PostgreSQL half is skipped, unless IDEM_REQUIRE_POSTGRES insists (then it fails).
const postgresServer = (await isServerReachable()) || postgresRequired();

const TARGETS = [
  { database: 'a SQLite file', open: () => openSqliteCliTarget(), skip: false },
  {
    database: 'a SQLite file through libsql (--driver libsql)',
    open: () => openSqliteCliTarget('libsql'),
    skip: false,
  },
  { database: 'a PostgreSQL schema', open: () => openPostgresCliTarget(), skip: !postgresServer },
  {
    database: 'a PostgreSQL schema through postgres-js (--driver postgres-js)',
    open: () => openPostgresCliTarget('postgres-js'),
    skip: !postgresServer,
  },
  { database: 'a MySQL database', open: openMysqlCliTarget, skip: !mysqlServer },
];

describe.each(TARGETS)('idem on $database', ({ open, skip }) => {
  let target: CliTarget;
  /** The CLI on this target's driver. */
  const idem = (args: string[], databaseUrl: string | undefined) =>
    idemCli(target.driver ? [...args, '--driver', target.driver] : args, databaseUrl);
  let store: DrizzleStore;
  const key = `order-${randomUUID()}`;
  const scope = 'payments.create|acct_1';
  const otherScope = 'refunds.create|acct_1';
  let sweepKeys: string[] = [];

  beforeAll(async () => {
    if (!skip) target = await open();
  });
  afterAll(async () => {
    await target?.close();
  });

  /** Claims (scope, key) and stores an outcome: one generation. */
  async function execute(
    scopeOf: string,
    keyOf: string,
    retentionMs: number,
    outcome: { kind: 'success' | 'error'; status: number },
  ) {
    const token = randomUUID();
    for (let attempt = 0; ; attempt++) {
      const claim = await store.claim({
        scope: scopeOf,
        key: keyOf,
        fingerprint: 'f1',
        token,
        leaseMs: 30_000,
        retentionMs,
        expiredReuse: 'execute',
      });
      if (claim.outcome === 'claimed') break;
      // Still within its retention by the database clock: wait, as the late retry did.
      if (attempt > 100) throw new Error('the key never expired');
      await sleep(50);
    }
    expect(
      await store.complete({
        scope: scopeOf,
        key: keyOf,
        token,
        outcome: { ...outcome, body: JSON.stringify({ secret: SECRET }) },
      }),
    ).toBe(true);
  }

  it.skipIf(skip)(
    'migrate creates the tables, prints the database it migrated (password redacted), and is harmless when run again',
    async () => {
      const first = await idem(['migrate'], target.url);
      expect(first.stderr).toBe('');
      expect(first.code).toBe(0);
      expect(first.stdout).toMatch(target.description);
      const second = await idem(['migrate'], target.url);
      expect(second).toEqual(first);
      store = createDrizzleStore(target.db);
      expect(await store.timeline(scope, key)).toEqual([]);
    },
  );

  it.skipIf(skip)(
    'A1: explain prints each generation of a reused key (first seen, completed, status, expiry, archiving, reuse), explains the reuse, and --json matches the timeline',
    async () => {
      await execute(scope, key, 200, { kind: 'success', status: 200 });
      await execute(scope, key, 3_600_000, { kind: 'error', status: 502 }); // reused after 200 ms: generation 2
      const otherToken = randomUUID();
      await store.claim({
        scope: otherScope,
        key,
        fingerprint: null,
        token: otherToken,
        leaseMs: 30_000,
        retentionMs: 3_600_000,
        expiredReuse: 'execute',
        onFailure: 'resume',
      });
      // A duplicate waiting on the other scope's claim in progress (E3w).
      expect(await store.countWait({ scope: otherScope, key, generation: 1 })).toBe(true);
      // E8: one step, then a failure kept for a retry to resume.
      const owner = { scope: otherScope, key, token: otherToken };
      expect(await store.saveStep({ ...owner, name: 'reserve', result: JSON.stringify(SECRET) })).toBe(true);
      expect(
        await store.complete({ ...owner, outcome: { kind: 'error', status: 503, body: SECRET }, resumable: true }),
      ).toBe(true);
      const timeline = await store.timeline(scope, key);
      expect(timeline.map((entry) => entry.generation)).toEqual([1, 2]);
      const [first, second] = timeline as [TimelineEntry, TimelineEntry];

      const [text, json] = await Promise.all([
        idem(['explain', key], target.url),
        idem(['explain', key, '--scope', scope, '--json'], target.url),
      ]);

      expect(text.stderr).toBe('');
      expect(text.code).toBe(0);
      const out = text.stdout;
      expect(out).not.toContain(SECRET);
      expect(out).toContain(`scope ${scope}, key "${key}": 2 generations`);
      expect(out).toContain(`scope ${otherScope}, key "${key}": 1 generation`);
      expect(out.indexOf(`scope ${scope}`)).toBeLessThan(out.indexOf(`scope ${otherScope}`));
      expect(out).toMatch(
        /^generation {2}first seen +completed +status +expired +archived +reused +waits +on failure +attempts +steps$/m,
      );
      const rows = out.split('\n').filter((line) => /^[12] /.test(line));
      expect(rows).toHaveLength(3);
      // Generation 1: 200, retention passed, archived when the key was reused.
      expect(rows[0]).toMatch(
        new RegExp(
          `^1 +${first.firstSeenAt.toISOString()} +${first.completedAt!.toISOString()} +200 success +yes, at ${first.expiresAt.toISOString()} +${first.archivedAt!.toISOString()} +${first.reusedAt!.toISOString()} +0 +replay \\(v1\\) +1 +—$`,
        ),
      );
      // Generation 2: the stored error, retention still running, not archived, not reused.
      expect(rows[1]).toMatch(
        new RegExp(
          `^2 +${second.firstSeenAt.toISOString()} +${second.completedAt!.toISOString()} +502 error +no, until ${second.expiresAt.toISOString()} +— +— +0 +replay \\(v1\\) +1 +—$`,
        ),
      );
      expect(rows[2]).toMatch(/^1 +\S+ +— +503 error, resumable +no, until \S+ +— +— +1 +resume \(v2\) +1 +reserve$/);
      expect(out).toContain('failed with 503 (an error) and is resumable');
      expect(out).toContain(
        `Generation 1, first seen at ${first.firstSeenAt.toISOString()}, completed with 200 at ${first.completedAt!.toISOString()}`,
      );
      expect(out).toContain(`its retention ended at ${first.expiresAt.toISOString()}`);
      expect(out).toMatch(
        new RegExp(
          `the key was reused at ${first.reusedAt!.toISOString()}, [^,]+ after its retention ended, and executed again as generation 2\\.`,
        ),
      );
      expect(out).toContain(
        '2 generations stored an outcome: each was a separate execution of the handler, not a replay (R2)',
      );

      expect(json.stderr).toBe('');
      expect(json.code).toBe(0);
      expect(JSON.parse(json.stdout)).toEqual({
        key,
        scopes: [{ scope, generations: JSON.parse(JSON.stringify(timeline)) }],
      });
      expect(json.stdout).not.toContain(SECRET);
    },
  );

  it.skipIf(skip)('R3: sweep --batch-size 2 archives all 5 expired records and reports how many', async () => {
    sweepKeys = Array.from({ length: 5 }, () => `sweep-${randomUUID()}`);
    for (const each of sweepKeys) await execute('sweep|acct_1', each, 1, { kind: 'success', status: 200 });
    await sleep(20);
    const run = await idem(['sweep', '--batch-size', '2'], target.url);
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    expect(run.stdout).toBe('archived 5 expired records\n');
    for (const each of sweepKeys) {
      const record = await store.get('sweep|acct_1', each);
      expect(record).toMatchObject({ state: 'archived', outcome: { status: 200, body: null } });
    }
  });

  it.skipIf(skip)(
    'R3, R4: policy shows per scope the retention and lease of its newest record, counts by state, and how far back audits reach; --json the same figures',
    async () => {
      const [text, json] = await Promise.all([idem(['policy'], target.url), idem(['policy', '--json'], target.url)]);
      expect(text.stderr).toBe('');
      expect(text.code).toBe(0);
      expect(json.code).toBe(0);
      const document = JSON.parse(json.stdout) as {
        database: string;
        now: string;
        scopes: Array<Record<string, unknown>>;
      };
      expect(document.scopes.map((s) => s.scope)).toEqual([scope, otherScope, 'sweep|acct_1']);
      const [payments, refunds, sweep] = document.scopes;
      const history = (await store.timeline(scope, key))[0]!;
      expect(payments).toEqual({
        scope,
        retentionMs: 3_600_000,
        retention: '1h',
        leaseMs: 30_000,
        lease: '30s',
        counts: { processing: 0, completed: 1, released: 0, resumable: 0, archived: 0, history: 1 },
        expiredNotSwept: 0,
        oldestLiveFirstSeenAt: (await store.get(scope, key))!.createdAt.toISOString(),
        oldestArchivedFirstSeenAt: history.firstSeenAt.toISOString(),
      });
      expect(refunds).toMatchObject({
        counts: { processing: 0, completed: 0, released: 0, resumable: 1, archived: 0, history: 0 },
        oldestArchivedFirstSeenAt: null,
      });
      expect(sweep).toMatchObject({
        retentionMs: 1,
        leaseMs: 30_000,
        counts: { processing: 0, completed: 0, released: 0, resumable: 0, archived: 5, history: 0 },
        oldestLiveFirstSeenAt: null,
      });

      const lines = text.stdout.split('\n');
      expect(lines[0]).toMatch(/^idem records in .+ \(database clock \d{4}-\d\d-\d\dT[\d:.]+Z\)$/);
      expect(lines[1]).toMatch(
        /^scope +retention +lease +processing +completed +released +resumable +archived +history +expired, not swept +oldest live +oldest archived$/,
      );
      expect(lines[2]).toMatch(
        new RegExp(
          `^${scope.replace('|', '\\|')} +1h +30s +0 +1 +0 +0 +0 +1 +0 +\\S+Z +${history.firstSeenAt.toISOString()}$`,
        ),
      );
      expect(lines[4]).toMatch(/^sweep\|acct_1 +1ms +30s +0 +0 +0 +0 +5 +0 +0 +— +\S+Z$/);
      expect(text.stdout).toContain('how far back `idem explain` reaches (A1)');
    },
  );

  it.skipIf(skip)(
    'R3: purge --older-than deletes only records archived before the horizon, history first',
    async () => {
      const kept = await idem(['purge', '--older-than', '90d'], target.url);
      expect(kept).toEqual({ code: 0, stdout: 'deleted 0 archived records older than 90d\n', stderr: '' });
      await sleep(20);
      const purged = await idem(['purge', '--older-than=10ms'], target.url);
      expect(purged).toEqual({ code: 0, stdout: 'deleted 6 archived records older than 10ms\n', stderr: '' });
      expect(await store.get('sweep|acct_1', sweepKeys[0]!)).toBeNull();
      expect((await store.timeline(scope, key)).map((entry) => entry.generation)).toEqual([2]);
    },
  );

  it.skipIf(skip)(
    'A1: explain of a key with no record, in any scope or in the given one, fails with exit 1 and one line',
    async () => {
      const [nowhere, notInScope] = await Promise.all([
        idem(['explain', 'never-seen'], target.url),
        idem(['explain', key, '--scope', 'payments.create|acct_2'], target.url),
      ]);
      expectOneLineError(nowhere, 1, /^idem: no record of key "never-seen"$/);
      expectOneLineError(
        notInScope,
        1,
        new RegExp(
          `^idem: no record of key "${key}" in scope "payments.create\\|acct_2" \\(it is recorded in scope "${scope.replace('|', '\\|')}", "${otherScope.replace('|', '\\|')}"\\)$`,
        ),
      );
    },
  );
});

describe('idem: usage and failures are one line on stderr, never a stack trace', () => {
  const file = `file:${join(tmpdir(), `idem-cli-${randomUUID()}`, 'never-created.db')}`;

  it('bad usage exits 2: unknown command, bad --batch-size, bad duration, missing key, unset or unknown DATABASE_URL', async () => {
    const runs = await Promise.all([
      idem(['refund'], file),
      idem(['sweep', '--batch-size', 'lots'], file),
      idem(['purge', '--older-than', '90 days'], file),
      idem(['explain'], file),
      idem(['migrate'], undefined),
      idem(['migrate'], 'mongodb://localhost/db'),
      idem(['sweep', '--frobnicate'], file),
    ]);
    const reasons = [
      /^idem: unknown command "refund"/,
      /^idem: --batch-size must be a whole number from 1 to \d+, got "lots"$/,
      /^idem: --older-than must be a duration such as 90d, 24h or 30m, got "90 days"$/,
      /^idem: explain needs a key/,
      /^idem: set DATABASE_URL \(in the environment or in \.env\) or pass --database \(file:<path>, <path>\.db, postgres:\/\/… or postgresql:\/\/…, mysql:\/\/…\)$/,
      /^idem: DATABASE_URL "mongodb:\/\/localhost\/db" is neither/,
      /^idem: unknown option --frobnicate/,
    ];
    for (const [index, run] of runs.entries()) expectOneLineError(run, 2, reasons[index]!);
  });

  it('an unreachable database exits 1 with the reason and the URL, password redacted; a missing SQLite file is not created by a reader', async () => {
    const [postgres, withPassword, sqlite] = await Promise.all([
      idem(['sweep'], UNREACHABLE),
      idem(['policy', '--database', 'postgres://idem:s3cret@127.0.0.1:1/x'], undefined),
      idem(['explain', 'k'], file),
    ]);
    expectOneLineError(postgres, 1, /^idem: cannot reach postgres:\/\/postgres@127\.0\.0\.1:1\/x: .*ECONNREFUSED/);
    expectOneLineError(withPassword, 1, /^idem: cannot reach postgres:\/\/idem:\*\*\*@127\.0\.0\.1:1\/x: /);
    expect(withPassword.stderr).not.toContain('s3cret');
    expectOneLineError(sqlite, 1, /^idem: no SQLite database at .*never-created\.db: run idem migrate first$/);
  });

  it.skipIf(!mysqlServer)(
    'MySQL: an unreachable server and a database without the tables each exit 1 with one line, password redacted',
    async () => {
      const target = await openMysqlTarget({ prefix: 'idem_cli_empty' });
      try {
        const [unreachable, empty] = await Promise.all([
          idem(['sweep'], 'mysql://idem:s3cret@127.0.0.1:1/x'),
          idem(['explain', 'k'], target.url),
        ]);
        expectOneLineError(
          unreachable,
          1,
          /^idem: cannot reach mysql:\/\/idem:\*\*\*@127\.0\.0\.1:1\/x: .*ECONNREFUSED/,
        );
        expect(unreachable.stderr).not.toContain('s3cret');
        expectOneLineError(
          empty,
          1,
          new RegExp(
            `^idem: mysql://root@[^/]+/${target.database} has no idem tables: looked for idem_keys and idem_key_history \\(the default names\\); pass --prefix <prefix> \\(or set IDEM_TABLE_PREFIX\\) if your schema gives them another prefix, or run idem migrate to create the default ones$`,
          ),
        );
      } finally {
        await target.close();
      }
    },
  );

  it('--help and help print the usage on stdout and exit 0; help <command> and <command> --help print that command with an example', async () => {
    const [flag, command, explain, explainFlag, unknown] = await Promise.all([
      idem(['--help'], undefined),
      idem(['help'], undefined),
      idem(['help', 'explain'], undefined),
      idem(['explain', '--help'], undefined),
      idem(['help', 'refund'], undefined),
    ]);
    expect(flag).toEqual(command);
    expect(flag.code).toBe(0);
    expect(flag.stdout).toMatch(/^Usage: idem <command> \[options\]/);
    for (const command of [
      'migrate',
      'sweep [--batch-size N]',
      'purge --older-than <duration>',
      'explain <key> [--scope S]',
      'policy [--url <url>] [--json]',
      '--prefix <prefix>',
      '--version',
    ]) {
      expect(flag.stdout).toContain(command);
    }
    expect(explain).toEqual(explainFlag);
    expect(explain.code).toBe(0);
    expect(explain.stdout).toMatch(/^Usage: idem explain <key> \[--scope S\] \[--json\] \[options\]\n/);
    expect(explain.stdout).toMatch(/^Examples:\n {2}npx idem explain order-42$/m);
    expectOneLineError(unknown, 2, /^idem: unknown command "refund"/);
  });

  it('--version prints the version of @idem/drizzle, then the drizzle-orm it loads', async () => {
    const run = await idem(['--version'], undefined);
    const { version } = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
      version: string;
    };
    expect(run).toMatchObject({ code: 0, stderr: '' });
    const [first, second] = run.stdout.split('\n');
    expect(first).toBe(version);
    expect(second).toMatch(
      new RegExp(`^@idem/drizzle ${version.replaceAll('.', '\\.')}, drizzle-orm \\d+\\.\\d+\\.\\d+\\S*, Node\\.js `),
    );
  });

  it('R4: policy --url fetches the policy an app publishes (Accept: application/json) and prints its endpoints; a page that is not one fails with exit 1', async () => {
    const policy = createPolicyDocument({
      documentationUrl: 'http://localhost/idempotency',
      endpoints: [
        {
          endpoint: 'tRPC mutation payments.create',
          transport: 'trpc',
          operation: 'payments.create',
          keySources: ['Idempotency-Key header', 'input field idempotencyKey'],
          required: true,
          retentionMs: 86_400_000,
          leaseMs: 30_000,
          expiredReuse: 'execute',
          stored: 'result and errors after execution began',
          fingerprint: 'the validated input',
        },
      ],
    });
    /** The Accept header of each request, by path: the two runs below fetch at the same time. */
    const accepts = new Map<string | undefined, string | undefined>();
    const server = createServer((request, response) => {
      accepts.set(request.url, request.headers.accept);
      if (request.url === '/idempotency')
        response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(policy));
      else response.writeHead(404).end('not here');
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      const [text, missing] = await Promise.all([
        idem(['policy', '--url', `${base}/idempotency`], undefined),
        idem(['policy', '--url', `${base}/nope`], undefined),
      ]);
      expect(text.stderr).toBe('');
      expect(text.code).toBe(0);
      expect(text.stdout).toContain(`Idempotency policy (${base}/idempotency)`);
      expect(text.stdout).toMatch(/^endpoint +retention +lease +key sources +stored$/m);
      expect(text.stdout).toMatch(
        /^tRPC mutation payments\.create +24h +30s +Idempotency-Key header, input field idempotencyKey \(required\) +result and errors after execution began$/m,
      );
      expect(text.stdout).toContain(policy.clientGuidance);
      expect(accepts.get('/idempotency')).toBe('application/json');
      expect(accepts.get('/nope')).toBe('application/json');
      expectOneLineError(missing, 1, new RegExp(`^idem: GET ${base}/nope answered 404`));
    } finally {
      server.close();
    }
  });
});
