import { explainJson, renderExplain, type KeyTimelines } from './explain.js';
import { plural } from './format.js';
import { progressReporter } from './progress.js';
import { diagnose, doctorJson, renderDoctor, renderStats, statsJson } from './doctor.js';
import { EstimateUnavailableError, readStats, type CountsMode } from './health.js';
import { databasePolicyJson, renderDatabasePolicy } from './policy.js';
import { databaseNow, findScopes, scopeFigures } from './queries.js';
import { createDrizzleStore } from '../drizzle-store.js';
import { migrate } from '../migrate.js';
import {
  usageError,
  failure,
  INTERRUPTED,
  DEFAULT_SWEEP_LAG_MS,
  stringOf,
  noArguments,
  keyOf,
  batchSizeOf,
  logEveryOf,
  durationOf,
  isHttpUrl,
  type CommandSpec,
} from './options.js';
import { fetchPolicy } from './database.js';

export const command = <A extends object>(spec: CommandSpec<A>): CommandSpec<A> => spec;

/** The commands, in the order the usage lists them. */
export const COMMANDS = {
  migrate: command({
    synopsis: 'migrate',
    summary: "create or update the store's tables (safe to run again)",
    description:
      'Applies the committed migrations of idem_keys and idem_key_history (the default names), recorded in __idem_migrations. Tables under a prefix of yours (definePgTables({ prefix })) belong to your drizzle-kit migrations instead: idem migrate refuses a prefix, and refuses to run when your drizzle.config.ts schema defines the tables under other names.',
    options: [],
    examples: ['DATABASE_URL=postgres://app@db:5432/app npx idem migrate'],
    tables: 'create',
    parse: (positionals) => noArguments('migrate', positionals),
    async run(_, { opened, io }) {
      await migrate(opened.db);
      io.stdout(`migrated ${opened.description}\n`);
    },
  }),
  sweep: command({
    synopsis: 'sweep [--batch-size N] [--json]',
    summary: 'archive records past their retention, N per statement (default 1000) (R3)',
    description:
      'Archives every record past its retention, in batches: the body is dropped, status, fingerprint and timestamps are kept, so `idem explain` can still tell the story. Run it on a schedule (cron, a systemd timer) or let the app run startSweeper. Only one process sweeps a pair of tables at a time (an advisory lock on PostgreSQL and MySQL, a lease row on SQLite): when another is sweeping, sweep says so and exits 0. On a terminal a progress line shows records archived, batches and rate; elsewhere one line every --log-every batches, then the total; with --json one object at the end. Ctrl-C stops after the current batch, prints how far it got and exits 130.',
    options: ['batch-size', 'log-every', 'json'],
    examples: ['npx idem sweep --batch-size 1000', 'npx idem sweep --json'],
    tables: 'find',
    parse: (positionals, values) => ({
      ...noArguments('sweep', positionals),
      batchSize: batchSizeOf(values['batch-size']),
      logEvery: logEveryOf(values['log-every']),
      json: values.json === true,
    }),
    async run({ batchSize, logEvery, json }, { opened, tables, io, signal }) {
      const progress = progressReporter(io, { verb: 'sweep', noun: 'records archived', every: logEvery, json });
      const round = await createDrizzleStore(opened.db, { tables })
        .sweepExclusive({ batchSize, signal, onBatch: progress.onBatch })
        .finally(progress.end);
      if (round.skipped) {
        io.stdout(
          json
            ? `${JSON.stringify({ command: 'sweep', skipped: true, archived: 0 })}\n`
            : 'skipped: another process is sweeping these tables now\n',
        );
        return;
      }
      const { archived, batches, elapsedMs, stopped } = round;
      const interrupted = stopped === 'signal';
      if (json)
        io.stdout(`${JSON.stringify({ command: 'sweep', skipped: false, archived, batches, elapsedMs, stopped })}\n`);
      else if (interrupted)
        io.stdout(
          `interrupted: archived ${plural(archived, 'expired record')} in ${plural(batches, 'batch', 'batches')} before Ctrl-C; run idem sweep again for the rest\n`,
        );
      else if (stopped === 'lost-lock')
        io.stdout(
          `archived ${plural(archived, 'expired record')}, then stopped: another process took the sweep lease over\n`,
        );
      else io.stdout(`archived ${plural(archived, 'expired record')}\n`);
      return interrupted ? INTERRUPTED : undefined;
    },
  }),
  purge: command({
    synopsis: 'purge --older-than <duration> [--json]',
    summary: 'delete records archived more than <duration> ago, e.g. 90d (R3)',
    description:
      'Deletes, for good, the records archived before the audit horizon: history rows first, then archived live rows, 5000 per statement. Choose a horizon longer than your reconciliation window. Progress, --json and Ctrl-C as for sweep.',
    options: ['older-than', 'log-every', 'json'],
    examples: ['npx idem purge --older-than 90d'],
    tables: 'find',
    parse(positionals, values) {
      noArguments('purge', positionals);
      const olderThan = stringOf(values['older-than']);
      if (olderThan === undefined) throw usageError('purge needs --older-than <duration>, e.g. --older-than 90d');
      return {
        olderThanMs: durationOf('--older-than', olderThan),
        olderThan: olderThan.trim(),
        logEvery: logEveryOf(values['log-every']),
        json: values.json === true,
      };
    },
    async run({ olderThanMs, olderThan, logEvery, json }, { opened, tables, io, signal }) {
      const progress = progressReporter(io, { verb: 'purge', noun: 'archived records deleted', every: logEvery, json });
      const { deleted, batches, elapsedMs, stopped } = await createDrizzleStore(opened.db, { tables })
        .purge({ olderThanMs, signal, onBatch: progress.onBatch })
        .finally(progress.end);
      const interrupted = stopped === 'signal';
      if (json)
        io.stdout(
          `${JSON.stringify({ command: 'purge', olderThan, olderThanMs, deleted, batches, elapsedMs, stopped })}\n`,
        );
      else if (interrupted)
        io.stdout(
          `interrupted: deleted ${plural(deleted, 'archived record')} older than ${olderThan} in ${plural(batches, 'batch', 'batches')} before Ctrl-C; run idem purge again for the rest\n`,
        );
      else io.stdout(`deleted ${plural(deleted, 'archived record')} older than ${olderThan}\n`);
      return interrupted ? INTERRUPTED : undefined;
    },
  }),
  explain: command({
    synopsis: 'explain <key> [--scope S] [--json]',
    summary: 'every generation of a key: first seen, completed, status, expiry, reuse, waits (A1)',
    description:
      'Prints, per scope, one row per generation of the key (with the duplicates that waited for its outcome, E3w) and, when it ran more than once, how it came back. Without --scope it looks in every scope that holds the key (reading the tables by key alone). The key bare or as the header sends it (\'"8e03978e-…"\'). Stored bodies are never printed (K5).',
    options: ['scope', 'json'],
    examples: [
      'npx idem explain order-42',
      "npx idem explain '\"8e03978e-40d5-43e8-bc93-6894a57f9324\"' --scope 'payments.create|acct_1' --json",
    ],
    tables: 'find',
    parse(positionals, values) {
      const [key, ...extra] = positionals;
      if (key === undefined || key === '')
        throw usageError('explain needs a key: idem explain <key> [--scope S] [--json]');
      if (extra.length > 0)
        throw usageError(`explain takes one key, got ${positionals.length} arguments (quote a key that has spaces)`);
      const scope = stringOf(values.scope);
      if (scope === '') throw usageError('--scope needs a non-empty value');
      return { key: keyOf(key), scope, json: values.json === true };
    },
    async run({ key, scope, json }, { opened, tables, io }) {
      const store = createDrizzleStore(opened.db, { tables });
      const scopes = scope === undefined ? await findScopes(opened, tables, key) : [scope];
      const timelines: KeyTimelines = { key, scopes: [] };
      for (const each of scopes) {
        const generations = await store.timeline(each, key);
        if (generations.length > 0) timelines.scopes.push({ scope: each, generations });
      }
      if (timelines.scopes.length === 0) {
        if (scope === undefined) throw failure(`no record of key ${JSON.stringify(key)}`);
        const elsewhere = await findScopes(opened, tables, key);
        const hint =
          elsewhere.length > 0
            ? ` (it is recorded in scope ${elsewhere.map((s) => JSON.stringify(s)).join(', ')})`
            : '';
        throw failure(`no record of key ${JSON.stringify(key)} in scope ${JSON.stringify(scope)}${hint}`);
      }
      io.stdout(`${json ? explainJson(timelines) : renderExplain(timelines, await databaseNow(opened))}\n`);
    },
  }),
  policy: command({
    synopsis: 'policy [--url <url>] [--json]',
    summary: 'retention, lease and counts per scope as stored; with --url, the policy an app publishes (R4)',
    description:
      "Without --url: per scope, the retention and lease of its newest record, counts by state, records past their retention not swept yet, and how far back `idem explain` reaches, as the database shows them (the CLI never sees the app's configuration). With --url: fetches the policy document the app publishes (Accept: application/json) and prints its endpoints.",
    options: ['json', 'url'],
    examples: ['npx idem policy', 'npx idem policy --url https://api.example.com/idempotency'],
    tables: 'find',
    parse(positionals, values) {
      noArguments('policy', positionals);
      const url = stringOf(values.url);
      if (url !== undefined && !isHttpUrl(url))
        throw usageError(`--url must be an http:// or https:// URL, got "${url}"`);
      return { url, json: values.json === true };
    },
    async run({ json }, { opened, tables, io }) {
      const now = await databaseNow(opened);
      const scopes = await scopeFigures(opened, tables);
      io.stdout(
        `${json ? databasePolicyJson(opened.description, now, scopes) : renderDatabasePolicy(opened.description, now, scopes)}\n`,
      );
    },
  }),
  stats: command({
    synopsis: 'stats [--exact | --estimate] [--json]',
    summary: 'records per state and per operation, stuck claims, takeovers, expired not swept, history',
    description:
      "Counts the live records per state and per operation (the scope after its principal), shows the oldest processing claim and whether its lease has passed, the takeovers of the last day, the records past their retention not swept yet (and since when), the archived records and the history rows. Each figure is one statement through an index; docs/drizzle.md (What stats and doctor read) shows each one's plan on PostgreSQL. The counts by state and operation: on PostgreSQL, above 1,000,000 rows (the planner's estimate), from the planner statistics without reading the table (--exact counts every row instead, --estimate uses the statistics on any table); on SQLite and MySQL, counted.",
    options: ['exact', 'estimate', 'json'],
    examples: ['npx idem stats', 'npx idem stats --json', 'npx idem stats --exact'],
    tables: 'find',
    parse: (positionals, values) => {
      if (values.exact === true && values.estimate === true)
        throw usageError('stats: --exact and --estimate exclude each other: pick one');
      const counts: CountsMode = values.exact === true ? 'exact' : values.estimate === true ? 'estimate' : 'auto';
      return { ...noArguments('stats', positionals), json: values.json === true, counts };
    },
    async run({ json, counts }, { opened, tables, io }) {
      const now = await databaseNow(opened);
      let stats;
      try {
        stats = await readStats(opened, tables, counts);
      } catch (error) {
        if (error instanceof EstimateUnavailableError)
          throw (error.usage ? usageError : failure)(`stats: ${error.message}`);
        throw error;
      }
      io.stdout(`${json ? statsJson(opened.description, now, stats) : renderStats(opened.description, now, stats)}\n`);
    },
  }),
  doctor: command({
    synopsis: 'doctor [--url <url>] [--sweep-lag <duration>] [--json]',
    summary: 'check the store: migrations and expiry index, clock skew, retention vs lease, stuck claims, sweeping',
    description:
      "Checks, and names each finding with what to do: every migration applied and the expiry index present (the sweeper reads through it); the clock of this machine against the database's (more than 2 s apart: fix NTP; expiry is judged by the database clock, R1); with --url, endpoints of the published policy whose retention is shorter than their lease (R1); processing claims past their lease (E6); the oldest expired record not swept for longer than --sweep-lag (R3). Exits 1 when there is a finding, 0 when none.",
    options: ['url', 'sweep-lag', 'json'],
    examples: ['npx idem doctor', 'npx idem doctor --url https://api.example.com/idempotency --sweep-lag 30m'],
    tables: 'find',
    parse(positionals, values) {
      noArguments('doctor', positionals);
      const url = stringOf(values.url);
      if (url !== undefined && !isHttpUrl(url))
        throw usageError(`--url must be an http:// or https:// URL, got "${url}"`);
      const lag = stringOf(values['sweep-lag']);
      return {
        url,
        sweepLagMs: lag === undefined ? DEFAULT_SWEEP_LAG_MS : durationOf('--sweep-lag', lag),
        json: values.json === true,
      };
    },
    async run({ url, sweepLagMs, json }, { opened, tables, io }) {
      const policy = url === undefined ? undefined : await fetchPolicy(url);
      const findings = await diagnose(opened, tables, { policy, sweepLagMs });
      io.stdout(`${json ? doctorJson(opened.description, findings) : renderDoctor(opened.description, findings)}\n`);
      return findings.some((each) => !each.ok) ? 1 : undefined;
    },
  }),
} satisfies Record<string, CommandSpec<object>>;

export type CommandName = keyof typeof COMMANDS;
export const COMMAND_NAMES = Object.keys(COMMANDS) as CommandName[];
