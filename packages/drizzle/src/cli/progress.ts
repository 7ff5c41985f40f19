/**
 * Progress of `idem sweep` and `idem purge`, batch by batch: on a terminal one line on stderr
 * rewritten in place (rows done, rate, batches); elsewhere (cron, a CI log) one line on stdout
 * every N batches; with `--json` nothing until the one object at the end.
 */
import type { BatchProgress } from '../sweeper.js';

export interface ProgressSink {
  stdout(text: string): void;
  stderr(text: string): void;
  /** Whether stderr is a terminal: then the progress line is rewritten in place. */
  isTTY?: boolean;
}

/** How often, at most, the terminal line is redrawn. */
const REDRAW_MS = 100;

/** `12,345 rows/s` style rate of `total` rows over `elapsedMs`. */
export function rate(total: number, elapsedMs: number): string {
  const perSecond = elapsedMs > 0 ? Math.round((total * 1000) / elapsedMs) : total;
  return `${perSecond}/s`;
}

/** A line such as `sweep: 4000 records archived, 4 batches, 2000/s`. */
export function progressLine(verb: string, noun: string, progress: BatchProgress): string {
  return `${verb}: ${progress.total} ${noun}, ${progress.batches} ${progress.batches === 1 ? 'batch' : 'batches'}, ${rate(progress.total, progress.elapsedMs)}`;
}

/**
 * The `onBatch` of one command run, and `end()` to clear the terminal line before the summary.
 * `every`: off a terminal, a line every this many batches.
 */
export function progressReporter(
  sink: ProgressSink,
  { verb, noun, every, json }: { verb: string; noun: string; every: number; json: boolean },
): { onBatch: (progress: BatchProgress) => void; end(): void } {
  let drawnAt = 0;
  let drawn = false;
  return {
    onBatch(progress) {
      if (json) return;
      if (sink.isTTY) {
        const now = Date.now();
        if (drawn && now - drawnAt < REDRAW_MS) return;
        drawnAt = now;
        drawn = true;
        sink.stderr(`\r\x1b[K${progressLine(verb, noun, progress)}`);
      } else if (progress.batches % every === 0) {
        sink.stdout(`${progressLine(verb, noun, progress)}\n`);
      }
    },
    end() {
      if (drawn) sink.stderr('\r\x1b[K');
    },
  };
}
