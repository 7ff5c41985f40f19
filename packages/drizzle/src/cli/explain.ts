/**
 * `idem explain`: a key's timeline (A1) as a table per scope, and in plain English when the
 * key was reused. Timelines carry no bodies, so nothing stored is ever printed (K5).
 */
import type { TimelineEntry } from '@idem/core/store';
import { formatDuration } from '@idem/core';
import { iso, NONE, plural, renderTable } from './format.js';

/** The timelines of one key, one per scope that holds it. */
export interface KeyTimelines {
  key: string;
  scopes: Array<{ scope: string; generations: TimelineEntry[] }>;
}

const HEADERS = [
  'generation',
  'first seen',
  'completed',
  'status',
  'expired',
  'archived',
  'reused',
  'waits',
  'on failure',
  'attempts',
  'steps',
] as const;

/**
 * The outcome status and kind (`200 success`, `500 error`), `, resumable` when the failure is kept
 * for a retry to resume (E8), or the state when none was stored.
 */
function statusCell(entry: TimelineEntry): string {
  if (entry.status !== null)
    return `${`${entry.status} ${entry.outcomeKind ?? ''}`.trimEnd()}${entry.state === 'resumable' ? ', resumable' : ''}`;
  return `none (${entry.state})`;
}

/** E8: the generation's mode as the policy page words it. */
function onFailureCell(entry: TimelineEntry): string {
  return entry.onFailure === 'resume' ? 'resume (v2)' : 'replay (v1)';
}

/** The most step names a table cell lists before it counts the rest. */
const STEPS_SHOWN = 4;

/** E8: the names of the recovery points, in completion order (their results are never printed, K5). */
function stepsCell(entry: TimelineEntry): string {
  if (entry.steps.length === 0) return NONE;
  const shown = entry.steps.slice(0, STEPS_SHOWN).join(', ');
  const more = entry.steps.length - STEPS_SHOWN;
  return more > 0 ? `${shown} +${more} more` : shown;
}

/** The retention end and whether it has passed, by the database's clock. */
function expiredCell(entry: TimelineEntry, now: Date): string {
  return entry.expiresAt.getTime() <= now.getTime()
    ? `yes, at ${iso(entry.expiresAt)}`
    : `no, until ${iso(entry.expiresAt)}`;
}

/** One table row per generation, oldest first. */
export function renderTimelineTable(generations: readonly TimelineEntry[], now: Date): string {
  return renderTable(
    HEADERS,
    generations.map((entry) => [
      String(entry.generation),
      iso(entry.firstSeenAt),
      iso(entry.completedAt),
      statusCell(entry),
      expiredCell(entry, now),
      iso(entry.archivedAt),
      iso(entry.reusedAt),
      String(entry.waits),
      onFailureCell(entry),
      String(entry.attempts),
      stepsCell(entry),
    ]),
  );
}

function outcomeClause(entry: TimelineEntry): string {
  if (entry.state === 'resumable') {
    const kind = entry.outcomeKind === 'error' ? ' (an error)' : '';
    return `failed with ${entry.status}${kind} and is resumable: a retry with the same key and payload runs it again, skipping its completed steps (E8)`;
  }
  if (entry.status !== null) {
    const kind = entry.outcomeKind === 'error' ? ' (an error)' : '';
    return `completed with ${entry.status}${kind} at ${iso(entry.completedAt)}`;
  }
  if (entry.state === 'released') return 'was released before its handler ran, so nothing was stored';
  if (entry.state === 'processing') return 'has no outcome yet (still processing)';
  return 'stored no outcome';
}

/** Whether a generation's story says more than its table row: it ran more than once, or it is resumable (E8). */
const eventful = (entry: TimelineEntry) => entry.attempts > 1 || entry.state === 'resumable';

/**
 * A paragraph telling the generations' story: what each one did, how many times it ran and its
 * recovery points (E8), when its retention ended, and when the key came back and ran again (R2).
 * Empty for a single generation that ran once and is not resumable.
 */
export function explainTimeline(generations: readonly TimelineEntry[], now: Date): string {
  if (generations.length < 2 && !generations.some(eventful)) return '';
  const sentences = generations.map((entry, index) => {
    const next = generations[index + 1];
    const clauses = [
      `Generation ${entry.generation}, first seen at ${iso(entry.firstSeenAt)}, ${outcomeClause(entry)}`,
    ];
    if (entry.takeovers > 0)
      clauses.push(
        `its claim was taken over ${entry.takeovers === 1 ? 'once' : `${entry.takeovers} times`} after a lease lapsed (E6)`,
      );
    if (entry.attempts > 1) {
      const resumes = entry.attempts - 1 - entry.takeovers;
      const why = [
        ...(entry.takeovers > 0 ? [plural(entry.takeovers, 'takeover')] : []),
        ...(resumes > 0 ? [plural(resumes, 'resumed retry', 'resumed retries')] : []),
      ];
      clauses.push(`its handler started ${entry.attempts} times (${why.join(' and ')})`);
    }
    if (entry.steps.length > 0)
      clauses.push(
        `it completed ${plural(entry.steps.length, 'step')}, in this order: ${entry.steps.join(', ')} (E8: a step that completed is not run again by a later attempt)`,
      );
    if (entry.waits > 0)
      clauses.push(
        `${entry.waits === 1 ? 'a duplicate' : `${entry.waits} duplicates`} waited for its outcome instead of answering 409 (E3w)`,
      );
    clauses.push(
      `its retention ${entry.expiresAt.getTime() <= now.getTime() ? 'ended' : 'ends'} at ${iso(entry.expiresAt)}`,
    );
    if (entry.archivedAt && (!entry.reusedAt || entry.archivedAt.getTime() < entry.reusedAt.getTime())) {
      clauses.push(`the sweeper archived it at ${iso(entry.archivedAt)}`);
    }
    if (entry.reusedAt && next) {
      const late = entry.reusedAt.getTime() - entry.expiresAt.getTime();
      const after = late >= 0 ? `, ${formatDuration(late)} after its retention ended,` : '';
      clauses.push(
        `the key was reused at ${iso(entry.reusedAt)}${after} and executed again as generation ${next.generation}`,
      );
    }
    return `${clauses.join('; ')}.`;
  });
  const executed = generations.filter((entry) => entry.status !== null).length;
  if (executed > 1) {
    sentences.push(
      `${executed} generations stored an outcome: each was a separate execution of the handler, not a replay (R2), so any side effect happened ${executed} times.`,
    );
  }
  return sentences.join(' ');
}

/** The full text of `idem explain`: a header line and a table per scope, then the explanation. */
export function renderExplain({ key, scopes }: KeyTimelines, now: Date): string {
  const blocks = scopes.map(({ scope, generations }) => {
    const header = `scope ${scope}, key "${key}": ${plural(generations.length, 'generation')}`;
    const explanation = explainTimeline(generations, now);
    return [header, renderTimelineTable(generations, now), ...(explanation ? ['', explanation] : [])].join('\n');
  });
  return `${blocks.join('\n\n')}\n\nTimes are ISO 8601 UTC; ${NONE} means none; "expired" is judged by the database clock (now ${iso(now)}).`;
}

/** `--json`: the timelines with instants as ISO strings. */
export function explainJson(timelines: KeyTimelines): string {
  return JSON.stringify(timelines, null, 2);
}
