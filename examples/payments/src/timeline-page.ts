/**
 * A key's timeline as a picture (A1): every generation of one `(scope, key)` on a time axis —
 * first seen, completed, retention end (expired), archived, reused — server-rendered SVG and
 * HTML from the store's `timeline(scope, key)`, with the answer to "why was this charged twice?"
 * above it. Timelines carry no bodies, so nothing stored is shown (K5).
 */
import { escapeHtml } from '@idem/core/http';
import { formatDuration } from '@idem/core';
import type { TimelineEntry } from '@idem/core/store';

const WIDTH = 1100;
const LEFT = 170;
const RIGHT = 40;
const TOP = 40;
const LANE = 110;
const COLORS = {
  processing: '#d97706',
  retained: '#16a34a',
  expired: '#dc2626',
  archived: '#6b7280',
  reused: '#7c3aed',
  axis: '#374151',
};

export interface TimelinePageInput {
  scope: string;
  key: string;
  generations: readonly TimelineEntry[];
  /** The server's clock when the page was drawn: the retention ends are judged by it. */
  now: Date;
}

/** The whole HTML page. */
export function renderTimelinePage({ scope, key, generations, now }: TimelinePageInput): string {
  return page(
    `Key ${key}`,
    `<h1>Key <code>${escapeHtml(key)}</code></h1>
<p class="scope">scope <code>${escapeHtml(scope)}</code> · ${generations.length} generation${generations.length === 1 ? '' : 's'}</p>
<p class="verdict" data-executions="${executions(generations)}">${verdict(generations, now)}</p>
${renderTimelineSvg(generations, now)}
${legend()}
${table(generations)}
<p class="note">Times are UTC, by the server's clock (now ${escapeHtml(iso(now))}). Each generation that stored an outcome was an execution of the handler.</p>`,
  );
}

/** The page for a key the store has no record of, or a form when scope or key is missing. */
export function renderLookupPage({ scope, key, message }: { scope?: string; key?: string; message: string }): string {
  return page(
    'Key timeline',
    `<h1>Key timeline</h1>
<p class="message">${escapeHtml(message)}</p>
<form method="get" action="/admin/timeline">
  <label>Scope <input name="scope" value="${escapeHtml(scope ?? '')}" placeholder="alice/payments.create" required></label>
  <label>Key <input name="key" value="${escapeHtml(key ?? '')}" required></label>
  <button type="submit">Show</button>
</form>`,
  );
}

const executions = (generations: readonly TimelineEntry[]) =>
  generations.filter((entry) => entry.status !== null).length;

/** The story in one paragraph: how often the handler ran, and why each reuse ran again. */
function verdict(generations: readonly TimelineEntry[], now: Date): string {
  const ran = executions(generations);
  const parts = [
    `<strong>The handler ran ${ran === 1 ? 'once' : ran === 0 ? 'never' : `${ran} times`} for this key.</strong>`,
  ];
  generations.forEach((entry, index) => {
    const next = generations[index + 1];
    const ended = entry.expiresAt.getTime() <= now.getTime() ? 'ended' : 'ends';
    // E8: a resumable generation stored its last attempt's failure (no completion): a retry resumes it.
    const resumable = entry.state === 'resumable';
    const outcome =
      entry.status === null
        ? `stored no outcome (${entry.state})`
        : resumable || entry.completedAt === null
          ? `its attempt ${entry.attempts ?? 1} failed with ${entry.status} ${entry.outcomeKind ?? ''}`.trimEnd() +
            ` after the steps ${(entry.steps ?? []).join(', ') || '(none)'}, resumable`
          : `completed at ${time(entry.completedAt)} with ${entry.status} ${entry.outcomeKind ?? ''}`.trimEnd();
    let sentence = resumable
      ? `Generation ${entry.generation}, first seen at ${time(entry.firstSeenAt)}, ${outcome}: a retry with the same key and payload runs it again, skipping the steps done, until its retention ${ended} at ${time(entry.expiresAt)}.`
      : `Generation ${entry.generation}, first seen at ${time(entry.firstSeenAt)}, ${outcome}; retries were replayed until its retention ${ended} at ${time(entry.expiresAt)}.`;
    if (entry.reusedAt && next) {
      const late = entry.reusedAt.getTime() - entry.expiresAt.getTime();
      const when =
        late >= 0
          ? `${formatDuration(late)} after the retention ended`
          : `${formatDuration(-late)} before the retention ended`;
      sentence += ` The key came back at ${time(entry.reusedAt)}, ${when}: the server no longer replayed the first outcome, so it ran again as generation ${next.generation} (R2).`;
    }
    parts.push(escapeHtml(sentence));
  });
  return parts.join(' ');
}

/** The SVG: one lane per generation, a shared time axis below. */
export function renderTimelineSvg(generations: readonly TimelineEntry[], now: Date): string {
  const instants = generations
    .flatMap((entry) => [entry.firstSeenAt, entry.completedAt, entry.expiresAt, entry.archivedAt, entry.reusedAt])
    .filter((at): at is Date => at !== null);
  instants.push(now);
  const min = Math.min(...instants.map((at) => at.getTime()));
  const max = Math.max(...instants.map((at) => at.getTime()));
  const pad = Math.max((max - min) * 0.04, 50);
  const from = min - pad;
  const to = max + pad;
  const x = (at: Date) => LEFT + ((at.getTime() - from) / (to - from)) * (WIDTH - LEFT - RIGHT);
  const height = TOP + generations.length * LANE + 60;
  const axisY = TOP + generations.length * LANE + 10;

  const lanes = generations.map((entry, index) => {
    const y = TOP + index * LANE + 45;
    const next = generations[index + 1];
    const end = entry.completedAt ?? now;
    const shapes: string[] = [
      `<text x="12" y="${y - 6}" class="lane-title">Generation ${entry.generation}</text>`,
      `<text x="12" y="${y + 14}" class="lane-sub">${escapeHtml(entry.status === null ? entry.state : `${entry.status} ${entry.outcomeKind ?? ''}`)}</text>`,
      `<line x1="${LEFT}" y1="${y}" x2="${WIDTH - RIGHT}" y2="${y}" class="lane"/>`,
      // Processing: from first seen to the stored outcome (or now).
      `<rect x="${x(entry.firstSeenAt)}" y="${y - 7}" width="${Math.max(3, x(end) - x(entry.firstSeenAt))}" height="14" fill="${COLORS.processing}" data-event="processing"><title>processing ${escapeHtml(iso(entry.firstSeenAt))} → ${escapeHtml(iso(end))}</title></rect>`,
    ];
    if (entry.completedAt) {
      shapes.push(
        `<rect x="${x(entry.completedAt)}" y="${y - 7}" width="${Math.max(0, x(entry.expiresAt) - x(entry.completedAt))}" height="14" fill="${COLORS.retained}" opacity="0.85" data-event="retained"><title>replayed until ${escapeHtml(iso(entry.expiresAt))}</title></rect>`,
        `<path d="M${x(entry.completedAt)} ${y - 13} l6 6 l-6 6 l-6 -6 z" fill="${COLORS.axis}" data-event="completed"/>`,
        label(x(entry.completedAt) + 8, y + 30, `completed ${time(entry.completedAt)}`, 'start'),
      );
    }
    shapes.push(
      `<circle cx="${x(entry.firstSeenAt)}" cy="${y}" r="6" fill="#fff" stroke="${COLORS.axis}" stroke-width="2" data-event="first-seen"/>`,
      label(x(entry.firstSeenAt) + 8, y - 16, `first seen ${time(entry.firstSeenAt)}`, 'start'),
    );
    const expired = entry.expiresAt.getTime() <= now.getTime();
    shapes.push(
      `<line x1="${x(entry.expiresAt)}" y1="${y - 18}" x2="${x(entry.expiresAt)}" y2="${y + 18}" stroke="${COLORS.expired}" stroke-width="3" ${expired ? '' : 'stroke-dasharray="4 3"'} data-event="${expired ? 'expired' : 'expires'}"/>`,
      label(
        x(entry.expiresAt),
        y - 24,
        `${expired ? 'expired' : 'expires'} ${time(entry.expiresAt)}`,
        'middle',
        COLORS.expired,
      ),
    );
    const forgottenUntil = entry.reusedAt ?? entry.archivedAt;
    if (expired && forgottenUntil && forgottenUntil > entry.expiresAt) {
      shapes.push(
        `<line x1="${x(entry.expiresAt)}" y1="${y}" x2="${x(forgottenUntil)}" y2="${y}" stroke="${COLORS.expired}" stroke-width="2" stroke-dasharray="6 4"/>`,
      );
    }
    if (entry.archivedAt) {
      shapes.push(
        `<rect x="${x(entry.archivedAt) - 6}" y="${y - 6}" width="12" height="12" fill="${COLORS.archived}" data-event="archived"/>`,
        label(x(entry.archivedAt) + 10, y + 48, `archived ${time(entry.archivedAt)}`, 'start', COLORS.archived),
      );
    }
    if (entry.reusedAt) {
      const reusedX = x(entry.reusedAt);
      shapes.push(
        `<circle cx="${reusedX}" cy="${y}" r="7" fill="${COLORS.reused}" data-event="reused"/>`,
        label(reusedX, y - 40, `reused ${time(entry.reusedAt)}`, 'middle', COLORS.reused),
      );
      if (next) {
        const nextY = y + LANE;
        shapes.push(
          `<path d="M${reusedX} ${y + 8} C ${reusedX} ${y + LANE / 2}, ${x(next.firstSeenAt)} ${nextY - LANE / 2}, ${x(next.firstSeenAt)} ${nextY - 9}" fill="none" stroke="${COLORS.reused}" stroke-width="2" marker-end="url(#arrow)"/>`,
        );
      }
    }
    return `<g class="generation" data-generation="${entry.generation}">${shapes.join('')}</g>`;
  });

  const ticks = Array.from({ length: 6 }, (_, i) => new Date(from + ((to - from) * i) / 5)).map(
    (at, i, all) =>
      `<line x1="${x(at)}" y1="${axisY}" x2="${x(at)}" y2="${axisY + 6}" stroke="${COLORS.axis}"/><text x="${x(at)}" y="${axisY + 22}" text-anchor="${i === 0 ? 'start' : i === all.length - 1 ? 'end' : 'middle'}" class="tick">${time(at)}</text>`,
  );
  const nowX = x(now);
  return `<svg xmlns="http://www.w3.org/2000/svg" class="timeline" viewBox="0 0 ${WIDTH} ${height}" width="${WIDTH}" height="${height}" role="img" aria-label="Generations of the key on a time axis">
<defs><marker id="arrow" viewBox="0 0 10 10" refX="5" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0 0 L10 5 L0 10 z" fill="${COLORS.reused}"/></marker></defs>
${lanes.join('\n')}
<line x1="${nowX}" y1="${TOP - 10}" x2="${nowX}" y2="${axisY}" stroke="${COLORS.axis}" stroke-dasharray="2 4"/><text x="${nowX}" y="${TOP - 14}" text-anchor="middle" class="tick">now</text>
<line x1="${LEFT}" y1="${axisY}" x2="${WIDTH - RIGHT}" y2="${axisY}" stroke="${COLORS.axis}"/>
${ticks.join('')}
</svg>`;
}

function label(x: number, y: number, text: string, anchor: 'start' | 'middle', color: string = COLORS.axis): string {
  return `<text x="${x}" y="${y}" text-anchor="${anchor}" fill="${color}" class="event">${escapeHtml(text)}</text>`;
}

function legend(): string {
  const item = (swatch: string, text: string) => `<span class="item">${swatch}${escapeHtml(text)}</span>`;
  const bar = (color: string) => `<svg width="22" height="12"><rect width="22" height="12" fill="${color}"/></svg>`;
  return `<p class="legend">${[
    item(
      '<svg width="14" height="14"><circle cx="7" cy="7" r="5" fill="#fff" stroke="#374151" stroke-width="2"/></svg>',
      'first seen',
    ),
    item(bar(COLORS.processing), 'processing (the handler ran)'),
    item(bar(COLORS.retained), 'stored: retries get the replay'),
    item(
      `<svg width="6" height="16"><rect width="3" height="16" fill="${COLORS.expired}"/></svg>`,
      'retention ended: forgotten',
    ),
    item(
      `<svg width="14" height="14"><rect x="1" y="1" width="12" height="12" fill="${COLORS.archived}"/></svg>`,
      'archived',
    ),
    item(
      `<svg width="14" height="14"><circle cx="7" cy="7" r="6" fill="${COLORS.reused}"/></svg>`,
      'key reused: a new generation ran',
    ),
  ].join('')}</p>`;
}

function table(generations: readonly TimelineEntry[]): string {
  const cell = (at: Date | null) => `<td>${at ? escapeHtml(iso(at)) : '—'}</td>`;
  const rows = generations.map(
    (entry) =>
      `<tr><td>${entry.generation}</td>${cell(entry.firstSeenAt)}${cell(entry.completedAt)}<td>${escapeHtml(entry.status === null ? `none (${entry.state})` : `${entry.status} ${entry.outcomeKind ?? ''}`)}</td>${cell(entry.expiresAt)}${cell(entry.archivedAt)}${cell(entry.reusedAt)}<td>${entry.takeovers}</td><td>${entry.waits}</td><td>${onFailureLabel(entry)}</td><td>${entry.attempts ?? 1}</td><td>${escapeHtml((entry.steps ?? []).join(', ') || '—')}</td></tr>`,
  );
  return `<table><thead><tr><th>generation</th><th>first seen</th><th>completed</th><th>status</th><th>retention ends</th><th>archived</th><th>reused</th><th>takeovers</th><th>waits</th><th>on failure</th><th>attempts</th><th>steps done</th></tr></thead><tbody>${rows.join('')}</tbody></table>`;
}

/** E8: the generation's mode, fixed at its claim; a resumable generation says so. */
function onFailureLabel(entry: TimelineEntry): string {
  const mode = entry.onFailure === 'resume' ? 'resume (Stripe v2)' : 'replay (Stripe v1)';
  return entry.state === 'resumable' ? `${mode}: resumable` : mode;
}

function page(title: string, body: string): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${escapeHtml(title)} · payments admin</title>
<style>
body { font: 15px/1.45 system-ui, sans-serif; margin: 24px 32px; color: #111827; max-width: 1140px; }
code { font-size: 14px; background: #f3f4f6; padding: 1px 4px; border-radius: 3px; }
.scope { color: #4b5563; margin-top: -8px; }
.verdict { background: #fef3c7; border-left: 4px solid #d97706; padding: 10px 14px; }
.timeline { display: block; margin: 16px 0 4px; background: #fff; border: 1px solid #e5e7eb; border-radius: 6px; }
.timeline .lane { stroke: #e5e7eb; stroke-width: 2; }
.timeline .lane-title { font: 600 15px system-ui, sans-serif; }
.timeline .lane-sub { font: 13px system-ui, sans-serif; fill: #4b5563; }
.timeline .event { font: 12px system-ui, sans-serif; }
.timeline .tick { font: 12px ui-monospace, monospace; fill: #374151; }
.legend { display: flex; flex-wrap: wrap; gap: 18px; font-size: 13px; color: #374151; }
.legend .item { display: inline-flex; align-items: center; gap: 6px; }
table { border-collapse: collapse; font-size: 13px; margin-top: 12px; }
th, td { border: 1px solid #e5e7eb; padding: 4px 8px; text-align: left; font-variant-numeric: tabular-nums; white-space: nowrap; }
.note { color: #6b7280; font-size: 13px; }
form label { display: block; margin: 6px 0; }
</style></head>
<body>${body}</body></html>`;
}

const iso = (at: Date) => at.toISOString();
/** HH:MM:SS.mmm, UTC (the table below the picture has the full ISO 8601 instants). */
const time = (at: Date) => at.toISOString().slice(11, 23);
