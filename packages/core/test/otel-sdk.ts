/**
 * The real OpenTelemetry SDK for the tests of `@idem/core/otel` and of the adapters under it: the
 * in-memory metric and span exporters, a tracer provider and the AsyncLocalStorage context
 * manager registered globally, a fresh meter provider per test. Call {@link useOpenTelemetrySdk}
 * at the top of a test file.
 */
import { context, metrics, trace, type Attributes } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
  type MetricData,
} from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, beforeEach, expect } from 'vitest';

export interface OpenTelemetrySdk {
  readonly tracer: ReturnType<BasicTracerProvider['getTracer']>;
  readonly spans: InMemorySpanExporter;
  /** This test's meter provider, read by {@link OpenTelemetrySdk.reader}. */
  readonly meterProvider: MeterProvider;
  readonly reader: PeriodicExportingMetricReader;
  readonly exporter: InMemoryMetricExporter;
  /** Every metric exported so far in this test, by name. */
  collected(): Promise<Map<string, MetricData>>;
  /** Runs `body` inside an active span, as a host's HTTP instrumentation would, and returns the span's attributes. */
  inRequestSpan(name: string, body: () => Promise<unknown>): Promise<Attributes>;
}

export function useOpenTelemetrySdk(): OpenTelemetrySdk {
  const spans = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] });
  const tracer = tracerProvider.getTracer('test');
  let exporter!: InMemoryMetricExporter;
  let reader!: PeriodicExportingMetricReader;
  let meterProvider!: MeterProvider;

  beforeAll(() => {
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    trace.setGlobalTracerProvider(tracerProvider);
  });
  afterAll(async () => {
    trace.disable();
    context.disable();
    metrics.disable();
    await tracerProvider.shutdown();
  });
  beforeEach(() => {
    spans.reset();
    exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
    // Exports when the test flushes it, never on a timer.
    reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 2 ** 30 });
    meterProvider = new MeterProvider({ readers: [reader] });
  });

  return {
    tracer,
    spans,
    get meterProvider() {
      return meterProvider;
    },
    get reader() {
      return reader;
    },
    get exporter() {
      return exporter;
    },
    async collected() {
      await reader.forceFlush();
      const byName = new Map<string, MetricData>();
      for (const resource of exporter.getMetrics())
        for (const scope of resource.scopeMetrics)
          for (const metric of scope.metrics) byName.set(metric.descriptor.name, metric);
      return byName;
    },
    async inRequestSpan(name, body) {
      await tracer.startActiveSpan(name, async (span) => {
        try {
          await body();
        } catch {
          // A refusal is the request's answer; the span records what idem said.
        } finally {
          span.end();
        }
      });
      const finished = spans.getFinishedSpans().find((span) => span.name === name);
      expect(finished, `span ${name}`).toBeDefined();
      return finished!.attributes;
    },
  };
}

/** The `idempotency.events` counter's points as `event operation [store operation] = value`, sorted. */
export function counted(metric: MetricData | undefined): string[] {
  if (!metric) return [];
  return metric.dataPoints
    .map(({ attributes, value }) => {
      const store = attributes['idempotency.store_operation'];
      const resumable = attributes['idempotency.resumable'] === true ? ' resumable' : '';
      return `${attributes['idempotency.event']} ${attributes['idempotency.operation']}${store ? ` ${store}` : ''}${resumable} = ${value}`;
    })
    .sort();
}
