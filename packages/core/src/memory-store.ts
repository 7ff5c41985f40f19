import type {
  ClaimRenewal,
  CompleteArgs,
  SaveStepArgs,
  ClaimRequest,
  ClaimResult,
  GenerationRef,
  IdempotencyRecord,
  IdempotencyStore,
  TimelineEntry,
} from './store.js';
import { archivedSteps, decideClaim, isExpired, toTimelineEntry, withStep } from './store-rules.js';

export interface MemoryStoreOptions {
  /** The store's clock, in epoch milliseconds. Defaults to `Date.now`. */
  now?: () => number;
}

interface HistoryRecord extends IdempotencyRecord {
  reusedAt: Date;
}

/**
 * An in-memory store for tests and single-process development. Everything is lost on exit
 * and nothing is shared between processes: use `@idem/drizzle` in production.
 */
export class MemoryStore implements IdempotencyStore {
  readonly #live = new Map<string, IdempotencyRecord>();
  readonly #history = new Map<string, HistoryRecord[]>();
  readonly #now: () => number;

  constructor({ now = Date.now }: MemoryStoreOptions = {}) {
    this.#now = now;
  }

  async claim(request: ClaimRequest): Promise<ClaimResult> {
    const now = this.#now();
    const id = recordId(request.scope, request.key);
    const decision = decideClaim(this.#live.get(id), request, now);
    switch (decision.rule) {
      case 'existing':
        return { outcome: 'existing', record: copy(decision.record), now: new Date(now), expired: decision.expired };
      case 'own':
        return { outcome: 'claimed', record: copy(decision.record) };
      case 'insert':
        return { outcome: 'claimed', record: copy(this.#put(id, fresh(request, now, 1))) };
      case 'reclaim':
        return { outcome: 'claimed', record: copy(this.#put(id, fresh(request, now, decision.record.generation))) };
      case 'reuse': {
        const previous = decision.record;
        const archived: HistoryRecord = {
          ...previous,
          state: 'archived',
          archivedAt: previous.archivedAt ?? new Date(now),
          outcome: previous.outcome && { ...previous.outcome, body: null },
          steps: archivedSteps(previous.steps),
          reusedAt: new Date(now),
        };
        this.#history.set(id, [...(this.#history.get(id) ?? []), archived]);
        const record = this.#put(id, fresh(request, now, previous.generation + 1));
        return { outcome: 'claimed', record: copy(record), expired: copy(archived) };
      }
      case 'takeover': {
        const { record } = decision;
        const takeover = { previousToken: record.token, previousLeaseUntil: record.leaseUntil };
        record.token = request.token;
        record.leaseUntil = new Date(now + request.leaseMs);
        record.takeovers += 1;
        record.attempts += 1;
        return { outcome: 'claimed', record: copy(record), takeover };
      }
      case 'resume': {
        const { record } = decision;
        const resumed = { attempt: record.attempts + 1, previousStatus: record.outcome?.status ?? null };
        record.token = request.token;
        record.state = 'processing';
        record.leaseUntil = new Date(now + request.leaseMs);
        record.attempts += 1;
        record.outcome = null;
        return { outcome: 'claimed', record: copy(record), resumed };
      }
    }
  }

  async complete({ scope, key, token, outcome, resumable = false }: CompleteArgs): Promise<boolean> {
    const record = this.#owned(scope, key, token);
    if (!record) return false;
    const now = this.#now();
    record.state = resumable ? 'resumable' : 'completed';
    record.outcome = { ...outcome };
    // E8: a resumable failure is not a completion: the window it may be resumed in counts from
    // the first sight (`expiresAt` as the claim set it), so that the completion that ends it
    // still finds the retention as `expiresAt − createdAt` however many attempts came before.
    if (resumable) return true;
    record.completedAt = new Date(now);
    // R1: retention counts from completion; the claim carried it as expiresAt − createdAt.
    record.expiresAt = new Date(now + (record.expiresAt.getTime() - record.createdAt.getTime()));
    return true;
  }

  async saveStep({ scope, key, token, name, result }: SaveStepArgs): Promise<boolean> {
    const record = this.#owned(scope, key, token);
    if (!record) return false;
    record.steps = withStep(record.steps, name, result);
    return true;
  }

  async renew({ scope, key, token, leaseMs }: ClaimRenewal): Promise<boolean> {
    const record = this.#owned(scope, key, token);
    if (!record) return false;
    record.leaseUntil = new Date(this.#now() + leaseMs);
    return true;
  }

  async countWait({ scope, key, generation }: GenerationRef): Promise<boolean> {
    const record = this.#live.get(recordId(scope, key));
    if (!record || record.generation !== generation) return false;
    record.waits += 1;
    return true;
  }

  async release({ scope, key, token }: { scope: string; key: string; token: string }): Promise<boolean> {
    const record = this.#owned(scope, key, token);
    if (!record) return false;
    record.state = 'released';
    return true;
  }

  async get(scope: string, key: string): Promise<IdempotencyRecord | null> {
    const record = this.#live.get(recordId(scope, key));
    return record ? copy(record) : null;
  }

  async timeline(scope: string, key: string): Promise<TimelineEntry[]> {
    const id = recordId(scope, key);
    const entries: TimelineEntry[] = (this.#history.get(id) ?? []).map((record) =>
      toTimelineEntry(record, record.reusedAt),
    );
    const live = this.#live.get(id);
    if (live) entries.push(toTimelineEntry(live, null));
    return entries;
  }

  async sweep({ batchSize = 1000 }: { batchSize?: number } = {}): Promise<{ archived: number }> {
    const now = this.#now();
    let archived = 0;
    for (const record of this.#live.values()) {
      if (archived >= batchSize) break;
      if (record.state === 'archived' || !isExpired(record, now)) continue;
      record.state = 'archived';
      record.archivedAt = new Date(now);
      if (record.outcome) record.outcome = { ...record.outcome, body: null };
      record.steps = archivedSteps(record.steps);
      archived++;
    }
    return { archived };
  }

  async purge({ olderThanMs }: { olderThanMs: number }): Promise<{ deleted: number }> {
    const horizon = this.#now() - olderThanMs;
    let deleted = 0;
    const old = (record: IdempotencyRecord) => record.archivedAt !== null && record.archivedAt.getTime() < horizon;
    for (const [id, history] of this.#history) {
      const kept = history.filter((record) => !old(record));
      deleted += history.length - kept.length;
      if (kept.length === 0) this.#history.delete(id);
      else this.#history.set(id, kept);
    }
    for (const [id, record] of this.#live) {
      if (record.state === 'archived' && old(record)) {
        this.#live.delete(id);
        deleted++;
      }
    }
    return { deleted };
  }

  async ping(): Promise<void> {}

  #put(id: string, record: IdempotencyRecord): IdempotencyRecord {
    this.#live.set(id, record);
    return record;
  }

  #owned(scope: string, key: string, token: string): IdempotencyRecord | undefined {
    const record = this.#live.get(recordId(scope, key));
    return record && record.state === 'processing' && record.token === token ? record : undefined;
  }
}

function recordId(scope: string, key: string): string {
  return `${scope}\u0000${key}`;
}

function fresh(request: ClaimRequest, now: number, generation: number): IdempotencyRecord {
  return {
    scope: request.scope,
    key: request.key,
    generation,
    fingerprint: request.fingerprint,
    state: 'processing',
    token: request.token,
    createdAt: new Date(now),
    leaseUntil: new Date(now + request.leaseMs),
    expiresAt: new Date(now + request.retentionMs),
    completedAt: null,
    archivedAt: null,
    takeovers: 0,
    waits: 0,
    outcome: null,
    onFailure: request.onFailure ?? 'replay',
    attempts: 1,
    steps: [],
  };
}

function copy<T extends IdempotencyRecord>(record: T): T {
  return {
    ...record,
    outcome: record.outcome && { ...record.outcome },
    steps: record.steps.map((step) => ({ ...step })),
  };
}
