/**
 * What `idem stats` prints, and `idem doctor`'s checks: each check passes, or names its finding
 * and what to do about it.
 */
import { formatDuration } from '@idem/core';
import { iso, NONE, plural, renderTable } from './format.js';
import { claimsPastLease, expiredBacklog, hasExpiryIndex, migrationsBehind, STATES, type Stats } from './health.js';
import type { PublishedPolicy } from './policy.js';
import { databaseNow } from './queries.js';
import type { OpenedDatabase } from '../connect.js';
import type { TableNames } from '../table-names.js';

/** More apart than this, the application's and the database's clocks disagree (R1: expiry uses the database's). */
export const MAX_CLOCK_SKEW_MS = 2000;

export function renderStats(description: string, now: Date, s: Stats): string {
  const oldest = s.oldestProcessing;
  return [
    `idem records in ${description} (database clock ${iso(now)})`,
    '',
    ...countsNote(s.counts),
    renderTable(
      ['state', 'records'],
      STATES.map((state) => [state, String(s.states[state])]),
    ),
    '',
    s.operations.length === 0
      ? 'no records'
      : renderTable(
          ['operation', ...STATES],
          s.operations.map((o) => [o.operation, ...STATES.map((state) => String(o[state]))]),
        ),
    '',
    `oldest processing claim: ${
      oldest
        ? `${oldest.scope}, first seen ${iso(oldest.firstSeenAt)}, lease until ${iso(oldest.leaseUntil)}${oldest.pastLease ? ' (past its lease: idem doctor)' : ''}`
        : NONE
    }`,
    `takeovers in the last day: ${s.takeoversLastDay}`,
    `expired, not swept: ${s.expiredNotSwept}${s.oldestExpiredAt ? ` (the oldest expired at ${iso(s.oldestExpiredAt)})` : ''}`,
    `archived: ${s.archived}`,
    `history rows: ${s.history}`,
  ].join('\n');
}

/** Says, above the counts, that they are the planner's estimates, and what is missing for them. */
function countsNote(counts: Stats['counts']): string[] {
  if (counts.kind === 'count') return [];
  const when = counts.analyzedAt ? `analyzed ${iso(counts.analyzedAt)}` : 'analyzed at an unknown time';
  const lines = [
    `counts by state and operation: estimated from PostgreSQL's planner statistics (~${counts.rows} rows, ${when}); idem stats --exact counts them (a scan of the table)`,
  ];
  if (counts.missingStatistics)
    lines.push(
      `no per-operation statistics on this table (created by your own migrations?): add this statement to a migration, then the operations show: ${counts.missingStatistics}`,
    );
  return [...lines, ''];
}

export function statsJson(description: string, now: Date, s: Stats): string {
  return JSON.stringify(
    {
      database: description,
      now: iso(now),
      ...s,
      oldestProcessing: s.oldestProcessing && {
        ...s.oldestProcessing,
        firstSeenAt: iso(s.oldestProcessing.firstSeenAt),
        leaseUntil: iso(s.oldestProcessing.leaseUntil),
      },
      counts:
        s.counts.kind === 'count'
          ? s.counts
          : { ...s.counts, analyzedAt: s.counts.analyzedAt && iso(s.counts.analyzedAt) },
      oldestExpiredAt: s.oldestExpiredAt && iso(s.oldestExpiredAt),
    },
    null,
    2,
  );
}

/** One check of `idem doctor`: passed, or its finding and what to do. */
export interface Check {
  check: 'migrations' | 'expiry-index' | 'clock-skew' | 'retention-vs-lease' | 'claims-past-lease' | 'sweeping';
  ok: boolean;
  /** What is wrong (a finding) or what was seen (a pass). */
  detail: string;
  /** What to do; only on a finding. */
  fix?: string;
}

export async function diagnose(
  opened: OpenedDatabase,
  tables: TableNames,
  { policy, sweepLagMs }: { policy: PublishedPolicy | undefined; sweepLagMs: number },
): Promise<Check[]> {
  const checks: Check[] = [];

  const behind = await migrationsBehind(opened, tables);
  if (behind === undefined)
    checks.push({
      check: 'migrations',
      ok: true,
      detail: `${tables.keys} and ${tables.history} are your schema's tables: your drizzle-kit migrations create them`,
    });
  else
    checks.push(
      behind === 0
        ? { check: 'migrations', ok: true, detail: 'every migration of this version is applied' }
        : {
            check: 'migrations',
            ok: false,
            detail: `${plural(behind, 'migration')} of this version not applied`,
            fix: 'run idem migrate (or migrate() at start-up)',
          },
    );

  checks.push(
    (await hasExpiryIndex(opened, tables))
      ? { check: 'expiry-index', ok: true, detail: `${tables.keys}_expires_at_idx is present` }
      : {
          check: 'expiry-index',
          ok: false,
          detail: `${tables.keys} has no index ${tables.keys}_expires_at_idx: every sweep reads the whole table`,
          fix: `create it again: idem migrate for the default tables (a fresh database), or your drizzle-kit migration of the schema's expiry index (drizzle-kit generate, then migrate)`,
        },
  );

  const before = Date.now();
  const dbNow = (await databaseNow(opened)).getTime();
  const after = Date.now();
  const skew = dbNow - (before + after) / 2;
  const roundTrip = after - before;
  checks.push(
    Math.abs(skew) <= MAX_CLOCK_SKEW_MS + roundTrip / 2
      ? { check: 'clock-skew', ok: true, detail: `this machine and the database agree within ${MAX_CLOCK_SKEW_MS} ms` }
      : {
          check: 'clock-skew',
          ok: false,
          detail: `the database clock is ${formatDuration(Math.abs(Math.round(skew)))} ${skew > 0 ? 'ahead of' : 'behind'} this machine's`,
          fix: 'synchronise both with NTP; retention and leases are judged by the database clock (R1), so app logs and the database disagree until then',
        },
  );

  if (policy) {
    const short = policy.endpoints.filter(
      (e) => typeof e.retentionMs === 'number' && typeof e.leaseMs === 'number' && e.retentionMs < e.leaseMs,
    );
    checks.push(
      short.length === 0
        ? {
            check: 'retention-vs-lease',
            ok: true,
            detail: `every endpoint of the published policy keeps its keys at least as long as its lease (${plural(policy.endpoints.length, 'endpoint')})`,
          }
        : {
            check: 'retention-vs-lease',
            ok: false,
            detail: `retention shorter than the lease on ${short.map((e) => `${e.endpoint} (retention ${formatDuration(e.retentionMs!)}, lease ${formatDuration(e.leaseMs!)})`).join(', ')}`,
            fix: 'set a retention longer than the lease (and than your clients retry for): a claim never expires inside its lease, so such a key expires the moment it completes and a retry runs again',
          },
    );
  }

  const stuck = await claimsPastLease(opened, tables);
  checks.push(
    stuck.count === 0
      ? { check: 'claims-past-lease', ok: true, detail: 'no processing claim is past its lease' }
      : {
          check: 'claims-past-lease',
          ok: false,
          detail: `${plural(stuck.count, 'processing claim')} past the lease (the oldest in ${stuck.oldestScope}, lease ended ${iso(stuck.oldestLeaseUntil)})`,
          fix: 'their owners stopped before storing an outcome (a crash, a deploy): the next retry with the key takes the claim over (E6); check the handler did not half-run (idem explain <key> --scope <scope>), and raise the lease if handlers outlive it',
        },
  );

  const stats = await expiredBacklog(opened, tables);
  const lagMs = stats.oldestExpiredAt ? dbNow - stats.oldestExpiredAt.getTime() : 0;
  checks.push(
    lagMs <= sweepLagMs
      ? {
          check: 'sweeping',
          ok: true,
          detail:
            stats.expiredNotSwept === 0
              ? 'nothing waits for the sweeper'
              : `${plural(stats.expiredNotSwept, 'expired record')} waiting, the oldest for ${formatDuration(lagMs)}`,
        }
      : {
          check: 'sweeping',
          ok: false,
          detail: `sweeping is overdue: ${plural(stats.expiredNotSwept, 'expired record')} not archived, the oldest expired ${formatDuration(lagMs)} ago (more than --sweep-lag ${formatDuration(sweepLagMs)})`,
          fix: 'run idem sweep on a schedule (cron, a systemd timer) or startSweeper in the app',
        },
  );
  return checks;
}

export function renderDoctor(description: string, checks: readonly Check[]): string {
  const findings = checks.filter((each) => !each.ok);
  return [
    `idem doctor on ${description}`,
    ...checks.map((each) =>
      each.ok ? `ok    ${each.check}: ${each.detail}` : `FAIL  ${each.check}: ${each.detail}\n      fix: ${each.fix}`,
    ),
    findings.length === 0 ? 'no findings' : `${plural(findings.length, 'finding')}`,
  ].join('\n');
}

export function doctorJson(description: string, checks: readonly Check[]): string {
  return JSON.stringify({ database: description, ok: checks.every((each) => each.ok), checks }, null, 2);
}
