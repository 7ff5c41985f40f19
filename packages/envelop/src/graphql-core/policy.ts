/** Retention, lease, wait, reuse rule and failure mode per mutation, by schema coordinate (R1, E6, E3w, R2, E8), and as published (R4). */
import type { GraphQLSchema } from 'graphql';
import { toMilliseconds, type EndpointPolicy, type EndpointPolicyDescription } from '@idem/core';
import { retentionMsOf, type AdapterKit } from '@idem/core/adapter';

type OnFailure = NonNullable<EndpointPolicy['onFailure']>;

interface Resolved {
  retentionMs: number;
  leaseMs: number;
  waitMs: number;
  expiredReuse: 'execute' | 'reject';
  onFailure: OnFailure;
}

/** The engine's resolved policy, as `engine.policy` gives it. */
interface EngineDefaults extends Resolved {
  /** Whether the engine was given a `retention`; otherwise it depends on `onFailure` (R1, E8). */
  retentionExplicit: boolean;
}

/** @throws TypeError `[idem] …` for a coordinate that is not `Type.field`, or a duration that does not parse. */
export function endpointPolicies(policy: Readonly<Record<string, EndpointPolicy>>, engine: EngineDefaults) {
  const { leaseMs, waitMs, expiredReuse, onFailure } = engine;
  // R1, E8: an entry's own retention, else the engine's if it was given one, else its mode's default (24 hours, or 30 days to resume).
  const defaults: Resolved = { retentionMs: engine.retentionMs, leaseMs, waitMs, expiredReuse, onFailure };
  const resolved = new Map<string, Resolved>();
  for (const [coordinate, entry] of Object.entries(policy)) {
    if (!/^[_A-Za-z][_0-9A-Za-z]*\.[_A-Za-z][_0-9A-Za-z]*$/.test(coordinate))
      throw new TypeError(
        `[idem] useIdempotency: policy key ${JSON.stringify(coordinate)} is not a schema coordinate such as 'Mutation.refund'`,
      );
    const mode = entry.onFailure ?? onFailure;
    resolved.set(coordinate, {
      retentionMs: retentionMsOf(entry.retention, engine, mode),
      leaseMs: entry.lease === undefined ? defaults.leaseMs : toMilliseconds(entry.lease),
      waitMs: entry.wait === undefined ? defaults.waitMs : entry.wait === 0 ? 0 : toMilliseconds(entry.wait),
      expiredReuse: entry.expiredReuse ?? defaults.expiredReuse,
      onFailure: mode,
    });
  }
  const of = (coordinate: string) => resolved.get(coordinate) ?? defaults;

  return {
    /**
     * The policy of a unit over these root fields, for the engine's request: none of its own
     * when no field has an entry; else the longest retention and lease, the shortest wait (a unit
     * waits only as long as each of its fields allows), `reject` if any rejects, and `resume` only
     * when every field resumes (a field that replays its failures must never run twice).
     */
    forUnit(coordinates: readonly string[]): EndpointPolicy {
      if (!coordinates.some((coordinate) => resolved.has(coordinate))) return {};
      const entries = coordinates.map(of);
      return {
        retention: Math.max(...entries.map((entry) => entry.retentionMs)),
        lease: Math.max(...entries.map((entry) => entry.leaseMs)),
        wait: Math.min(...entries.map((entry) => entry.waitMs)),
        expiredReuse: entries.some((entry) => entry.expiredReuse === 'reject') ? 'reject' : 'execute',
        onFailure: entries.every((entry) => entry.onFailure === 'resume') ? 'resume' : 'replay',
      };
    },

    /** @throws TypeError `[idem] …` when the policy names a field the schema's mutation type does not have. */
    check(schema: GraphQLSchema): void {
      const rootType = schema.getMutationType();
      for (const coordinate of resolved.keys()) {
        const [type, field] = coordinate.split('.') as [string, string];
        if (type !== rootType?.name || !rootType.getFields()[field])
          throw new TypeError(
            `[idem] useIdempotency: policy names ${coordinate}, which is not a root mutation field of the schema`,
          );
      }
    },

    /** R4: each root mutation field of `schema` as the published policy lists it. */
    describe(
      schema: GraphQLSchema,
      { kit, directive }: { kit: Pick<AdapterKit<unknown>, 'key' | 'isRequired'>; directive: boolean },
    ): EndpointPolicyDescription[] {
      const rootType = schema.getMutationType();
      return Object.values(rootType?.getFields() ?? {}).map((field) => {
        const operation = `${rootType!.name}.${field.name}`;
        const argument = kit.key.field !== false && field.args.some((arg) => arg.name === kit.key.field);
        const keySources = [
          kit.key.header ? 'Idempotency-Key header (the whole mutation operation is one record)' : null,
          argument ? `argument ${kit.key.field}` : null,
          directive ? 'directive @idempotent(key:)' : null,
        ].filter((source): source is string => source !== null);
        return {
          endpoint: `GraphQL ${operation}`,
          transport: 'graphql',
          operation,
          keySources,
          required: kit.isRequired(field.name),
          ...of(operation),
          stored:
            'header key: the whole result (data and errors); argument or directive key: the field value or its error',
          fingerprint:
            'header key: the normalized operation document and its variables; argument or directive key: the field arguments (key left out), its selection as written and the values of the variables it reads',
        };
      });
    },
  };
}
