/**
 * `@idem/core/otel` through the real OpenTelemetry SDK: its in-memory metric and span exporters,
 * the AsyncLocalStorage context manager, and the engine on a memory store. A fresh call, a replay,
 * a conflict and a mismatch, each inside a request span as a host's instrumentation starts it.
 */
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { metrics } from '@opentelemetry/api';
import { DataPointType, type HistogramMetricData } from '@opentelemetry/sdk-metrics';
import { describe, expect, it, vi } from 'vitest';
import {
  combineEventHandlers,
  createEngine,
  FingerprintMismatchError,
  formatScope,
  MemoryStore,
  RequestInProgressError,
  type ExecuteRequest,
  type IdempotencyEvent,
} from '@idem/core';
import {
  IDEMPOTENCY_DURATION_BUCKETS,
  IDEMPOTENCY_DURATION_METRIC,
  IDEMPOTENCY_EVENTS_METRIC,
  idempotencyTelemetry,
} from '@idem/core/otel';
import { counted, useOpenTelemetrySdk } from './otel-sdk.ts';

const sdk = useOpenTelemetrySdk();
const { inRequestSpan, collected } = sdk;

const OPERATION = 'payments.create';
const PRINCIPAL = 'acct_secret_principal';
const KEY = 'key-that-must-stay-out-of-metrics';
const request = (fingerprint: string): ExecuteRequest => ({
  scope: formatScope(OPERATION, PRINCIPAL),
  operation: OPERATION,
  principal: PRINCIPAL,
  key: KEY,
  fingerprint,
});

describe('@idem/core/otel: idempotencyTelemetry()', () => {
  it('a fresh call, a replay, a conflict and a mismatch: counted by event and operation, spans say what idem answered', async () => {
    const engine = createEngine({
      store: new MemoryStore(),
      onEvent: idempotencyTelemetry({ meter: sdk.meterProvider.getMeter('test') }),
    });
    let release!: (value: string) => void;
    let running!: Promise<unknown>;
    const fresh = inRequestSpan('fresh', async () => {
      running = engine.execute(request('f'), () => new Promise<string>((resolve) => (release = resolve)));
      await running;
    });
    await vi.waitFor(() => expect(release).toBeTypeOf('function'));
    const conflict = await inRequestSpan('conflict', async () => {
      await expect(engine.execute(request('f'), () => 'again')).rejects.toBeInstanceOf(RequestInProgressError);
    });
    release('charged');
    const executed = await fresh;
    const replay = await inRequestSpan('replay', () => engine.execute(request('f'), () => 'again'));
    const mismatch = await inRequestSpan('mismatch', async () => {
      await expect(engine.execute(request('other'), () => 'again')).rejects.toBeInstanceOf(FingerprintMismatchError);
    });

    expect(executed).toEqual({
      'idempotency.key_present': true,
      'idempotency.operation': OPERATION,
      'idempotency.replayed': false,
      'idempotency.outcome': 'executed',
    });
    expect(replay).toEqual({
      'idempotency.key_present': true,
      'idempotency.operation': OPERATION,
      'idempotency.replayed': true,
      'idempotency.outcome': 'replayed',
    });
    expect(conflict).toEqual({
      'idempotency.key_present': true,
      'idempotency.operation': OPERATION,
      'idempotency.outcome': 'conflict',
    });
    expect(mismatch).toEqual({
      'idempotency.key_present': true,
      'idempotency.operation': OPERATION,
      'idempotency.outcome': 'mismatch',
    });

    const metrics = await collected();
    expect(counted(metrics.get(IDEMPOTENCY_EVENTS_METRIC))).toEqual([
      `claimed ${OPERATION} = 1`,
      `completed ${OPERATION} = 1`,
      `conflict ${OPERATION} = 1`,
      `mismatch ${OPERATION} = 1`,
      `replayed ${OPERATION} = 1`,
    ]);
    const duration = metrics.get(IDEMPOTENCY_DURATION_METRIC) as HistogramMetricData;
    expect(duration.descriptor.unit).toBe('s');
    expect(duration.dataPointType).toBe(DataPointType.HISTOGRAM);
    expect(duration.dataPoints).toHaveLength(1);
    const [point] = duration.dataPoints;
    expect(point!.attributes).toEqual({ 'idempotency.operation': OPERATION, 'idempotency.outcome_kind': 'success' });
    expect(point!.value.count).toBe(1);
    expect(point!.value.buckets.boundaries).toEqual(IDEMPOTENCY_DURATION_BUCKETS);
  });

  it('K5: no metric attribute, no span attribute carries the principal or the key', async () => {
    const engine = createEngine({
      store: new MemoryStore(),
      onEvent: idempotencyTelemetry({ meter: sdk.meterProvider.getMeter('test') }),
    });
    const attributes = [
      await inRequestSpan('first', () => engine.execute(request('f'), () => 'charged')),
      await inRequestSpan('again', () => engine.execute(request('f'), () => 'charged')),
      await inRequestSpan('other', () => engine.execute(request('g'), () => 'charged')),
    ];
    const metrics = await collected();
    const exported = JSON.stringify([attributes, [...metrics.values()].map((metric) => metric.dataPoints)]);
    expect(exported).toContain(OPERATION);
    expect(exported).not.toContain(PRINCIPAL);
    expect(exported).not.toContain(KEY);
  });

  it('records the handler duration from completed.durationMs, in seconds, by outcome kind', async () => {
    const onEvent = idempotencyTelemetry({ meter: sdk.meterProvider.getMeter('test') });
    const base = { scope: 's', operation: 'refunds.create', principal: 'p', key: 'k', requestId: 'r' };
    const completed = (durationMs: number, outcomeKind: 'success' | 'error'): IdempotencyEvent => ({
      ...base,
      type: 'completed',
      generation: 1,
      status: outcomeKind === 'success' ? 200 : 500,
      outcomeKind,
      withErrors: outcomeKind === 'error',
      durationMs,
      resumable: false,
    });
    onEvent(completed(30, 'success'));
    onEvent(completed(1_500, 'success'));
    onEvent(completed(8, 'error'));
    const duration = (await collected()).get(IDEMPOTENCY_DURATION_METRIC) as HistogramMetricData;
    const byKind = Object.fromEntries(
      duration.dataPoints.map(({ attributes, value }) => [attributes['idempotency.outcome_kind'], value]),
    );
    expect(byKind.success).toMatchObject({ count: 2, sum: 1.53, min: 0.03, max: 1.5 });
    expect(byKind.error).toMatchObject({ count: 1, sum: 0.008 });
  });

  it('E8: counts resumable completions and resumes; the span of a resumable failure says resumable', async () => {
    const engine = createEngine({
      store: new MemoryStore(),
      onFailure: 'resume',
      onEvent: idempotencyTelemetry({ meter: sdk.meterProvider.getMeter('test') }),
    });
    let calls = 0;
    const handler = async () => {
      if (++calls === 1) throw Object.assign(new Error('provider timeout'), { status: 503 });
      return 'charged';
    };
    const failed = await inRequestSpan('failed', () => engine.execute(request('f'), handler));
    const resumed = await inRequestSpan('resumed', () => engine.execute(request('f'), handler));
    expect(failed['idempotency.outcome']).toBe('resumable');
    expect(resumed['idempotency.outcome']).toBe('executed');
    expect(counted((await collected()).get(IDEMPOTENCY_EVENTS_METRIC))).toEqual([
      `claimed ${OPERATION} = 2`,
      `completed ${OPERATION} = 1`,
      `completed ${OPERATION} resumable = 1`,
      `resumed ${OPERATION} = 1`,
    ]);
  });

  it('counts takeovers, expired reuses and store errors (with the store call) under their event', async () => {
    let now = Date.parse('2026-12-01T10:00:00.000Z');
    const store = new MemoryStore({ now: () => now });
    const engine = createEngine({
      store,
      lease: '10s',
      retention: '1m',
      onEvent: idempotencyTelemetry({ meter: sdk.meterProvider.getMeter('test') }),
    });
    // A claim whose owner died: taken over once its lease has passed (E6).
    await store.claim({
      ...request('f'),
      token: 'dead',
      leaseMs: 10_000,
      retentionMs: 60_000,
      expiredReuse: 'execute',
    });
    now += 11_000;
    await engine.execute(request('f'), () => 'charged');
    // Past its retention, the key runs as new (R2).
    now += 120_000;
    await engine.execute(request('f'), () => 'charged again');
    // A store that cannot claim: 503 (E5).
    const broken = createEngine({
      store: Object.assign(new MemoryStore(), {
        claim: async () => {
          throw new Error('connection refused');
        },
      }),
      onEvent: idempotencyTelemetry({ meter: sdk.meterProvider.getMeter('test') }),
    });
    const refused = await inRequestSpan('refused', () => broken.execute(request('f'), () => 'never'));
    expect(refused['idempotency.outcome']).toBe('store_error');
    expect(counted((await collected()).get(IDEMPOTENCY_EVENTS_METRIC))).toEqual([
      `claimed ${OPERATION} = 2`,
      `completed ${OPERATION} = 2`,
      `expiredKeyReused ${OPERATION} = 1`,
      `staleTakeover ${OPERATION} = 1`,
      `storeError ${OPERATION} claim = 1`,
    ]);
  });

  it("without a meter, uses the global provider's meter `@idem/core`; spans: false leaves the span alone", async () => {
    metrics.setGlobalMeterProvider(sdk.meterProvider);
    try {
      const engine = createEngine({ store: new MemoryStore(), onEvent: idempotencyTelemetry({ spans: false }) });
      const attributes = await inRequestSpan('quiet', () => engine.execute(request('f'), () => 'charged'));
      expect(attributes).toEqual({});
      await sdk.reader.forceFlush();
      const scopes = sdk.exporter.getMetrics().flatMap((resource) => resource.scopeMetrics);
      expect(scopes.map((scope) => scope.scope.name)).toEqual(['@idem/core']);
      expect(counted((await collected()).get(IDEMPOTENCY_EVENTS_METRIC))).toEqual([
        `claimed ${OPERATION} = 1`,
        `completed ${OPERATION} = 1`,
      ]);
    } finally {
      metrics.disable();
    }
  });

  it('composes with your own hook: combineEventHandlers(idempotencyTelemetry(), yours)', async () => {
    const yours: string[] = [];
    const engine = createEngine({
      store: new MemoryStore(),
      onEvent: combineEventHandlers(idempotencyTelemetry({ meter: sdk.meterProvider.getMeter('test') }), (event) =>
        yours.push(event.type),
      ),
    });
    await engine.execute(request('f'), () => 'charged');
    expect(yours).toEqual(['claimed', 'completed']);
    expect(counted((await collected()).get(IDEMPOTENCY_EVENTS_METRIC))).toHaveLength(2);
  });
});

describe('@idem/core/otel without @opentelemetry/api installed', () => {
  it('no other entry imports @opentelemetry/api: only @idem/core/otel loads it, and only when called', () => {
    const dist = fileURLToPath(new URL('../dist/', import.meta.url));
    const importing = readdirSync(dist).filter(
      (file) => file.endsWith('.js') && readFileSync(path.join(dist, file), 'utf8').includes('@opentelemetry/'),
    );
    expect(importing).toEqual(['otel.js']);
    expect(readFileSync(path.join(dist, 'otel.js'), 'utf8')).not.toMatch(/^import .*@opentelemetry/m);
  });

  it('the entry loads; idempotencyTelemetry() throws an [idem] error that says what to install', () => {
    // The built entry, copied where no node_modules holds @opentelemetry/api.
    const dist = fileURLToPath(new URL('../dist/', import.meta.url));
    const app = mkdtempSync(path.join(tmpdir(), 'idem-otel-'));
    try {
      for (const file of ['otel.js', 'events.js']) copyFileSync(path.join(dist, file), path.join(app, file));
      writeFileSync(path.join(app, 'package.json'), '{"type":"module"}');
      const script = `
        const otel = await import('./otel.js');
        console.log(Object.keys(otel).sort().join(','));
        try { otel.idempotencyTelemetry(); console.log('no error'); }
        catch (error) { console.log(error.message); console.log(error.cause?.code); }`;
      const output = execFileSync(process.execPath, ['--input-type=module', '-e', script], {
        cwd: app,
        encoding: 'utf8',
      }).split('\n');
      expect(output[0]).toContain('idempotencyTelemetry');
      expect(output[1]).toBe(
        '[idem] idempotencyTelemetry() needs @opentelemetry/api, an optional peer of @idem/core: npm install @opentelemetry/api',
      );
      expect(output[2]).toBe('MODULE_NOT_FOUND');
    } finally {
      rmSync(app, { recursive: true, force: true });
    }
  });
});
