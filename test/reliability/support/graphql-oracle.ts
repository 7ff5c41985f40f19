/**
 * The generative oracle of GraphQL idempotency (SPEC K2, K4, E1–E4): a test schema whose
 * mutations record every side effect with the claim they ran under, a generator of legal
 * operations over it (aliases, fragments, inline fragments, variables with and without
 * defaults, explicit nulls, list and input coercion, `@include`/`@skip` at the root and inside
 * selections, header keys, argument keys, `@idempotent(key:)`), and an independent reading of
 * each generated operation — from the generator's own model, never from idem's code — of what
 * must hold when it is sent three times: first with its answer dropped, then twice more.
 */
import fc from 'fast-check';
import { GraphQLError } from 'graphql';
import { createSchema, createYoga } from 'graphql-yoga';
import { notStarted, idempotencyClaim, type IdempotencyStore } from '@idem/core';
import { idempotentDirectiveTypeDefs, useYogaIdempotency } from '@idem/envelop';
import { createIdempotentFetch } from '@idem/envelop/client';
import { ApolloServer, HeaderMap } from '@apollo/server';
import { useApolloIdempotency } from '@idem/apollo-server';

// ---------------------------------------------------------------------------------------------
// The schema and its side effects.

const typeDefs = /* GraphQL */ `
  input Money {
    amount: Int!
    currency: String! = "EUR"
  }
  input PayInput {
    money: Money!
    note: String
  }
  type Receipt {
    id: ID!
    "The response key of the root field whose side effect made this receipt."
    by: String!
    amount: Int!
    note: String
    tags(first: Int = 1): [String!]!
  }
  type Query {
    effects: Int!
  }
  type Mutation {
    "Non-null, nested input, the key argument; the only mutation that requires a key."
    pay(input: PayInput!, idempotencyKey: String): Receipt!
    "Nullable, an argument with a default."
    refund(amount: Int = 5, idempotencyKey: String): Receipt
    "A list argument (a single value coerces to a list)."
    tag(labels: [String!]!, idempotencyKey: String): Receipt
    "No key argument: a header key or @idempotent(key:) only."
    notify(message: String = "hi"): Receipt
  }
`;

/** One run of a mutation's real work, as the resolver saw it. */
export interface SideEffect {
  id: string;
  send: number;
  responseKey: string;
  field: string;
  claim: { scope: string; key: string; part: string | undefined } | null;
}

/** Yoga's context has the Fetch `Request`; the Apollo one, Apollo's own `HeaderMap`. */
interface Context {
  request: { headers: { get(name: string): string | null } };
}

/**
 * The amount decides what a resolver does: at most 0, it refuses before any side effect
 * (`notStarted(context, error)`, E4: not stored); 13 makes the side effect, then fails (stored).
 */
function createOracleSchema(effects: Map<string, SideEffect[]>) {
  let sequence = 0;
  const run = (field: string, amount: number, context: Context, info: { path: { key: string | number } }) => {
    if (amount <= 0)
      throw notStarted(
        context,
        new GraphQLError('amount must be positive', { extensions: { code: 'BAD_USER_INPUT' } }),
      );
    const op = context.request.headers.get('x-user')!;
    const claim = idempotencyClaim(context);
    const effect: SideEffect = {
      id: `r${++sequence}`,
      send: Number(context.request.headers.get('x-send')),
      responseKey: String(info.path.key),
      field,
      claim: claim ? { scope: claim.scope, key: claim.key, part: claim.part } : null,
    };
    effects.set(op, [...(effects.get(op) ?? []), effect]);
    if (amount === 13) throw new Error('the channel failed after charging');
    return { id: effect.id, by: effect.responseKey, amount };
  };
  return createSchema<Context>({
    typeDefs: [idempotentDirectiveTypeDefs, typeDefs],
    resolvers: {
      Query: { effects: () => sequence },
      Receipt: {
        note: (receipt: { id: string }) => `note of ${receipt.id}`,
        tags: (receipt: { id: string }, { first }: { first: number }) =>
          Array.from({ length: Math.max(0, first) }, (_, index) => `${receipt.id}/${index}`),
      },
      Mutation: {
        pay: (_: unknown, { input }: { input: { money: { amount: number } } }, context: Context, info) =>
          run('pay', input.money.amount, context, info),
        refund: (_: unknown, { amount }: { amount: number | null }, context: Context, info) =>
          run('refund', amount ?? 7, context, info),
        tag: (_: unknown, { labels }: { labels: string[] }, context: Context, info) =>
          run('tag', labels.length, context, info),
        notify: (_: unknown, __: unknown, context: Context, info) => run('notify', 1, context, info),
      },
    },
  });
}

/** GraphQL Yoga with `useYogaIdempotency` over `store`, principal = the `x-user` header (one per generated operation). */
/**
 * The oracle's schema served twice over one store, with the same options: GraphQL Yoga with
 * `useYogaIdempotency`, and Apollo Server 5 with `useApolloIdempotency` (both on the one GraphQL
 * core, `@idem/envelop/graphql-core`). `post` sends one request through either, as HTTP would.
 */
export function createOracleApp(store: IdempotencyStore) {
  const effects = new Map<string, SideEffect[]>();
  const options = {
    store,
    principal: ({ request }: Context) => request.headers.get('x-user')!,
    required: ['pay'],
  };
  const yoga = createYoga<Context>({
    schema: createOracleSchema(effects),
    logging: false,
    plugins: [useYogaIdempotency<Context>(options)],
  });
  const apollo = new ApolloServer<Context>({
    schema: createOracleSchema(effects),
    plugins: [useApolloIdempotency<Context>(options)],
    stopOnTerminationSignals: false,
  });
  const started = apollo.start();
  async function post(
    host: OracleHost,
    headers: Record<string, string>,
    body: unknown,
  ): Promise<{ status: number; body: any }> {
    if (host === 'yoga') {
      const response = await yoga.fetch('http://oracle/graphql', {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/graphql-response+json', ...headers },
        body: JSON.stringify(body),
      });
      return { status: response.status, body: await response.json() };
    }
    await started;
    const httpHeaders = new HeaderMap();
    for (const [name, value] of Object.entries({ 'content-type': 'application/json', ...headers }))
      httpHeaders.set(name.toLowerCase(), value);
    const response = await apollo.executeHTTPGraphQLRequest({
      // Parsed as Apollo's integrations parse it: JSON text in, values out.
      httpGraphQLRequest: { method: 'POST', headers: httpHeaders, search: '', body: JSON.parse(JSON.stringify(body)) },
      context: async () => ({ request: { headers: { get: (name: string) => httpHeaders.get(name) ?? null } } }),
    });
    if (response.body.kind !== 'complete') throw new Error('[oracle] Apollo Server answered in chunks');
    return { status: response.status ?? 200, body: JSON.parse(response.body.string) };
  }
  return { yoga, apollo, effects, post, stop: () => apollo.stop() };
}

export type OracleHost = 'yoga' | 'apollo';

// ---------------------------------------------------------------------------------------------
// The operation model and its generator.

type Literal = string | number | boolean | null | Literal[] | { [name: string]: Literal };

/** A value as the document writes it: a literal, or a variable (its declared type, default, and what the request sends). */
export type Slot =
  | { literal: Literal }
  | { variable: { type: string; nonNull: boolean; default?: Literal; sent: { value: Literal } | 'null' | 'absent' } };

export interface FieldModel {
  name: 'pay' | 'refund' | 'tag' | 'notify' | '__typename';
  alias: string | null;
  /** How the root selection reaches it. */
  via: 'field' | 'inline' | 'typed inline' | 'fragment';
  /** `@skip` / `@include` on the field, or on its fragment when `via` is one. */
  condition: { skip: boolean; value: Slot } | null;
  args: Record<string, Slot>;
  key: { in: 'argument' | 'directive'; value: Slot } | null;
  /** `note @include(if: …)` inside the selection: a condition graphql-js reads after the resolver ran. */
  noteCondition: Slot | null;
  /** Also selected a second time, unconditionally, under the same response key (graphql-js merges the nodes). */
  twice: boolean;
}

export interface OperationModel {
  fields: FieldModel[];
  header: string | null;
}

const KEYS = ['K1', 'K2', 'K3', ''];

function slot(literals: fc.Arbitrary<Literal>, type: string, nonNullPosition: boolean): fc.Arbitrary<Slot> {
  const sent = (value: number, nulls: number, absent: number) =>
    fc.oneof(
      { weight: value, arbitrary: literals.map((literal) => ({ value: literal })) },
      { weight: nulls, arbitrary: fc.constant('null' as const) },
      { weight: absent, arbitrary: fc.constant('absent' as const) },
    );
  // A non-null variable sent null or left out is a request error of graphql-js's own: rarely.
  const variables = [
    fc.record({ type: fc.constant(`${type}!`), nonNull: fc.constant(true), sent: sent(12, 1, 1) }),
    fc.record({ type: fc.constant(type), nonNull: fc.constant(false), default: literals, sent: sent(2, 2, 2) }),
    // A nullable variable without a default is only allowed where the argument is nullable.
    ...(nonNullPosition
      ? []
      : [fc.record({ type: fc.constant(type), nonNull: fc.constant(false), sent: sent(3, 2, 2) })]),
  ];
  return fc.oneof(
    { weight: 3, arbitrary: literals.map((literal): Slot => ({ literal })) },
    { weight: 2, arbitrary: fc.oneof(...variables).map((variable): Slot => ({ variable })) },
  );
}

const amounts = fc.constantFrom(10, 10, 20, 13, -1);
const payInput = fc.record({ money: fc.record({ amount: amounts }), note: fc.constantFrom<Literal>('n', null) });

const ARGUMENTS: Record<FieldModel['name'], Record<string, fc.Arbitrary<Slot>>> = {
  pay: { input: slot(payInput as fc.Arbitrary<Literal>, 'PayInput', true) },
  refund: { amount: slot(fc.constantFrom(5, 7, 13, 0), 'Int', false) },
  tag: { labels: slot(fc.constantFrom<Literal>(['x'], ['x', 'y'], [], 'solo'), '[String!]', true) },
  notify: {},
  __typename: {},
};

const field: fc.Arbitrary<FieldModel> = fc
  .constantFrom<FieldModel['name']>('pay', 'pay', 'refund', 'tag', 'notify', '__typename')
  .chain((name) =>
    fc.record({
      name: fc.constant(name),
      alias: fc.constantFrom(null, 'a', 'b', 'c', 'd'),
      via: fc.constantFrom<FieldModel['via']>('field', 'field', 'inline', 'typed inline', 'fragment'),
      condition: fc.option(fc.record({ skip: fc.boolean(), value: slot(fc.boolean(), 'Boolean', true) }), {
        nil: null,
        freq: 3,
      }),
      args: fc.record(ARGUMENTS[name]),
      key:
        name === '__typename'
          ? fc.constant(null)
          : fc.option(
              fc.oneof(
                ...(name === 'notify'
                  ? []
                  : [
                      fc.record({
                        in: fc.constant('argument' as const),
                        value: slot(fc.constantFrom(...KEYS), 'String', false),
                      }),
                    ]),
                fc.record({
                  in: fc.constant('directive' as const),
                  value: slot(fc.constantFrom(...KEYS), 'String', true),
                }),
              ),
              { nil: null, freq: 4 },
            ),
      noteCondition:
        name === '__typename'
          ? fc.constant(null)
          : fc.option(
              fc.oneof(
                { weight: 2, arbitrary: slot(fc.boolean(), 'Boolean', true) },
                // `$v: Boolean = true` sent as null: graphql-js fails the field after its resolver ran.
                {
                  weight: 1,
                  arbitrary: fc.boolean().map(
                    (value): Slot => ({
                      variable: { type: 'Boolean', nonNull: false, default: value, sent: 'null' },
                    }),
                  ),
                },
              ),
              { nil: null, freq: 3 },
            ),
      twice: fc.integer({ min: 1, max: 7 }).map((n) => n === 7),
    }),
  );

/**
 * 1–4 root fields with distinct response keys (two different fields under one would not
 * validate), and maybe a header key. Often the first field again under another alias, the
 * same arguments, with or without its own key: two root fields that could meet on one record.
 */
export const operationModel: fc.Arbitrary<OperationModel> = fc
  .record({
    fields: fc.uniqueArray(field, { minLength: 1, maxLength: 4, selector: (f) => f.alias ?? f.name }),
    header: fc.option(fc.constantFrom('K1', 'K2'), { nil: null, freq: 2 }),
    copy: fc.option(fc.boolean(), { nil: undefined, freq: 2 }),
    everyFieldKeyed: fc.boolean(),
  })
  .map(({ fields, header, copy, everyFieldKeyed }) => {
    const [first] = fields;
    if (copy !== undefined && first && first.name !== '__typename' && !fields.some((f) => (f.alias ?? f.name) === 'z'))
      fields = [...fields, { ...first, alias: 'z', key: copy ? first.key : null }];
    // The field unit with several fields: each one that has no key gets a key of its own.
    if (everyFieldKeyed)
      fields = fields.map((field, index) =>
        field.key || field.name === '__typename'
          ? field
          : { ...field, key: { in: 'directive' as const, value: { literal: `F${index}` } } },
      );
    return { fields, header };
  });

// ---------------------------------------------------------------------------------------------
// Printing a model as a request.

export interface GeneratedRequest {
  query: string;
  variables: Record<string, unknown>;
}

export function printOperation(model: OperationModel): GeneratedRequest {
  const definitions: string[] = [];
  const variables: Record<string, unknown> = {};
  const fragments: string[] = [];
  const value = (slot: Slot): string => {
    if ('literal' in slot) return literal(slot.literal);
    const name = `v${definitions.length}`;
    const { type, default: byDefault, sent } = slot.variable;
    definitions.push(`$${name}: ${type}${byDefault === undefined ? '' : ` = ${literal(byDefault)}`}`);
    if (sent === 'null') variables[name] = null;
    else if (sent !== 'absent') variables[name] = sent.value;
    return `$${name}`;
  };
  const condition = (model: FieldModel['condition']) =>
    model ? ` @${model.skip ? 'skip' : 'include'}(if: ${value(model.value)})` : '';
  const selections = model.fields.map((field, index) => {
    const head = `${field.alias ? `${field.alias}: ` : ''}${field.name}`;
    const args = Object.entries(field.args).map(([name, slot]) => `${name}: ${value(slot)}`);
    if (field.key?.in === 'argument') args.push(`idempotencyKey: ${value(field.key.value)}`);
    const call = `${head}${args.length ? `(${args.join(', ')})` : ''}`;
    const directive = field.key?.in === 'directive' ? ` @idempotent(key: ${value(field.key.value)})` : '';
    const note = field.noteCondition ? `note @include(if: ${value(field.noteCondition)})` : '';
    const selection = field.name === '__typename' ? '' : ` { id by amount ${note} tags }`;
    const onField = field.via === 'field' ? condition(field.condition) : '';
    const text = `${call}${onField}${directive}${selection}`;
    const onWrapper = field.via === 'field' ? '' : condition(field.condition);
    const again = field.twice ? ` ... { ${call}${field.name === '__typename' ? '' : ' { id by }'} }` : '';
    if (field.via === 'field') return text + again;
    if (field.via === 'inline') return `...${onWrapper} { ${text} }${again}`;
    if (field.via === 'typed inline') return `... on Mutation${onWrapper} { ${text} }${again}`;
    fragments.push(`fragment F${index} on Mutation { ${text} }`);
    return `...F${index}${onWrapper}${again}`;
  });
  const head = definitions.length ? `mutation (${definitions.join(', ')})` : 'mutation';
  return { query: [`${head} { ${selections.join(' ')} }`, ...fragments].join('\n'), variables };
}

function literal(value: Literal): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(literal).join(', ')}]`;
  return `{ ${Object.entries(value)
    .map(([name, field]) => `${name}: ${literal(field)}`)
    .join(', ')} }`;
}

// ---------------------------------------------------------------------------------------------
// The oracle's reading of a model: graphql-js's coercion rules, applied to the model.

type Read = { value: Literal } | 'absent' | 'variable error';

function read(slot: Slot): Read {
  if ('literal' in slot) return { value: slot.literal };
  const { nonNull, default: byDefault, sent } = slot.variable;
  if (sent === 'null') return nonNull ? 'variable error' : { value: null };
  if (sent === 'absent') return byDefault !== undefined ? { value: byDefault } : nonNull ? 'variable error' : 'absent';
  return { value: sent.value };
}

/** Whether graphql-js selects the field's main occurrence: true, false, or it cannot tell (a null `if`: an error). */
function mainIncluded(field: FieldModel): boolean | 'error' {
  if (!field.condition) return true;
  const condition = read(field.condition.value);
  if (typeof condition !== 'object' || condition.value === null) return 'error';
  return condition.value !== field.condition.skip;
}

/** Whether it selects the field at all: the unconditional second occurrence selects it too. */
function included(field: FieldModel): boolean | 'error' {
  const main = mainIncluded(field);
  return main === false ? field.twice : main;
}

/**
 * The key a field carries itself: a non-empty string, none, or one that does not coerce (a null
 * for `key: String!`). The directive sits on the main occurrence only: left out, it keys nothing.
 */
function ownKey(field: FieldModel): string | 'none' | 'error' {
  if (!field.key || (field.key.in === 'directive' && mainIncluded(field) === false)) return 'none';
  const key = read(field.key.value);
  if (key === 'variable error') return 'error';
  if (key === 'absent' || key.value === '') return 'none';
  if (key.value === null) return field.key.in === 'directive' ? 'error' : 'none';
  return String(key.value);
}

export interface Expectation {
  /** The operation carries a key (the header, or a field's own, even one that does not coerce) or a field that requires one. */
  keyed: boolean;
  /** Whether a client must leave the header off (some selected root field carries its own key); undefined when the server refuses the request anyway. */
  ownKeys: boolean | undefined;
}

export function expectationOf(model: OperationModel): Expectation {
  const selected = model.fields.filter((field) => included(field) !== false);
  const keys = selected.map(ownKey);
  const keyed =
    model.header !== null || keys.some((key) => key !== 'none') || selected.some((field) => field.name === 'pay');
  const unclear =
    selected.some((field) => included(field) === 'error') ||
    keys.includes('error') ||
    allSlots(model).some((slot) => read(slot) === 'variable error');
  return { keyed, ownKeys: unclear ? undefined : keys.some((key) => key !== 'none' && key !== 'error') };
}

function allSlots(model: OperationModel): Slot[] {
  return model.fields.flatMap((field) => [
    ...Object.values(field.args),
    ...(field.key ? [field.key.value] : []),
    ...(field.condition ? [field.condition.value] : []),
    ...(field.noteCondition ? [field.noteCondition] : []),
  ]);
}

/** Whether `createIdempotentFetch` adds an `Idempotency-Key` header to this request (it sends nothing: its `fetch` only looks). */
export async function clientAddsHeader(request: GeneratedRequest): Promise<boolean> {
  let sent: Headers | undefined;
  const fetch = createIdempotentFetch({
    retention: '24h',
    fetch: async (_input, init) => {
      sent = new Headers(init?.headers);
      return new Response('{"data":{}}', { headers: { 'content-type': 'application/json' } });
    },
  });
  await fetch('http://oracle/graphql', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(request),
  });
  return sent?.has('idempotency-key') ?? false;
}
