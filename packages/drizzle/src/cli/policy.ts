/**
 * `idem policy`: the retention policy as the database shows it (the CLI never sees the app's
 * configuration), or, with `--url`, the policy document an app publishes (R4).
 */
import { formatDuration } from '@idem/core';
import type { ScopeFigures } from './queries.js';
import { iso, NONE, renderTable } from './format.js';

const duration = (ms: number | null) => (ms === null ? NONE : formatDuration(ms));

/** The per-scope figures as a table, with a line on where each figure comes from. */
export function renderDatabasePolicy(description: string, now: Date, scopes: readonly ScopeFigures[]): string {
  const title = `idem records in ${description} (database clock ${iso(now)})`;
  if (scopes.length === 0) return `${title}\nno records yet.`;
  const table = renderTable(
    [
      'scope',
      'retention',
      'lease',
      'processing',
      'completed',
      'released',
      'resumable',
      'archived',
      'history',
      'expired, not swept',
      'oldest live',
      'oldest archived',
    ],
    scopes.map((s) => [
      s.scope,
      duration(s.retentionMs),
      duration(s.leaseMs),
      String(s.processing),
      String(s.completed),
      String(s.released),
      String(s.resumable),
      String(s.archived),
      String(s.history),
      String(s.expiredNotSwept),
      iso(s.oldestLive),
      iso(s.oldestArchived),
    ]),
  );
  return [
    title,
    table,
    '',
    "retention, lease: those of the scope's newest record (lease: newest never taken over); the app's configuration sets them for new records.",
    'resumable: failures kept for a retry with the same key to resume (E8, onFailure: resume); archived: swept in place (R3); history: earlier generations of reused keys (R2); expired, not swept: past retention, waiting for `idem sweep`.',
    'oldest live: first sight of the oldest record not archived; oldest archived: of the oldest archived generation kept, i.e. how far back `idem explain` reaches (A1).',
  ].join('\n');
}

/** `--json`: the same figures, instants as ISO strings, durations in ms and as text. */
export function databasePolicyJson(description: string, now: Date, scopes: readonly ScopeFigures[]): string {
  return JSON.stringify(
    {
      database: description,
      now,
      scopes: scopes.map((s) => ({
        scope: s.scope,
        retentionMs: s.retentionMs,
        retention: s.retentionMs === null ? null : formatDuration(s.retentionMs),
        leaseMs: s.leaseMs,
        lease: s.leaseMs === null ? null : formatDuration(s.leaseMs),
        counts: {
          processing: s.processing,
          completed: s.completed,
          released: s.released,
          resumable: s.resumable,
          archived: s.archived,
          history: s.history,
        },
        expiredNotSwept: s.expiredNotSwept,
        oldestLiveFirstSeenAt: s.oldestLive,
        oldestArchivedFirstSeenAt: s.oldestArchived,
      })),
    },
    null,
    2,
  );
}

/** The part of a published policy document (`createPolicyDocument` of `@idem/core`) the CLI shows. */
export interface PublishedEndpoint {
  endpoint: string;
  retention?: string;
  retentionMs?: number;
  lease?: string;
  leaseMs?: number;
  keySources?: string[];
  required?: boolean;
  stored?: string;
}

export interface PublishedPolicy {
  title?: string;
  clientGuidance?: string;
  endpoints: PublishedEndpoint[];
}

/** Checks that a fetched JSON value looks like a policy document; undefined when it does not. */
export function asPublishedPolicy(value: unknown): PublishedPolicy | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const endpoints = (value as { endpoints?: unknown }).endpoints;
  if (
    !Array.isArray(endpoints) ||
    !endpoints.every(
      (e) => typeof e === 'object' && e !== null && typeof (e as { endpoint?: unknown }).endpoint === 'string',
    )
  ) {
    return undefined;
  }
  return value as PublishedPolicy;
}

const spanText = (text: string | undefined, ms: number | undefined) =>
  text ?? (typeof ms === 'number' ? formatDuration(ms) : NONE);

/** A published policy as a table: endpoint, retention, lease, key sources, stored. */
export function renderPublishedPolicy(url: string, policy: PublishedPolicy): string {
  const table = renderTable(
    ['endpoint', 'retention', 'lease', 'key sources', 'stored'],
    policy.endpoints.map((e) => [
      e.endpoint,
      spanText(e.retention, e.retentionMs),
      spanText(e.lease, e.leaseMs),
      `${(e.keySources ?? []).join(', ') || NONE}${e.required === undefined ? '' : e.required ? ' (required)' : ' (optional)'}`,
      e.stored ?? NONE,
    ]),
  );
  return [
    `${policy.title ?? 'Idempotency policy'} (${url})`,
    policy.endpoints.length > 0 ? table : 'no endpoints.',
    ...(policy.clientGuidance ? ['', policy.clientGuidance] : []),
  ].join('\n');
}
