/** F1 for GraphQL: what the fingerprint sees of a document; which root fields execute, as graphql-js collects them. */
import { describe, expect, it } from 'vitest';
import { buildSchema, Kind, parse, type FragmentDefinitionNode, type OperationDefinitionNode } from 'graphql';
import { collectFields } from 'graphql/execution/collectFields.js';
import { MemoryStore } from '@idem/core';
import { createAdapterKit } from '@idem/core/adapter';
import { fieldSelection, normalizedOperation } from '../src/graphql-core/normalized-document.ts';
import { planOperation } from '../src/graphql-core/plan.ts';

const schema = buildSchema(`
  directive @idempotent(key: String!) on FIELD
  type Query { ok: Boolean }
  type Item { id: ID! name: String price: Int }
  type Mutation { create(name: String!, idempotencyKey: String): Item remove(id: ID!): Boolean }
`);
const operationOf = (source: string, name?: string) => {
  const document = parse(source);
  const operation = document.definitions.find(
    (definition): definition is OperationDefinitionNode =>
      definition.kind === 'OperationDefinition' && (name === undefined || definition.name?.value === name),
  )!;
  const fragments: Record<string, FragmentDefinitionNode> = {};
  for (const definition of document.definitions)
    if (definition.kind === Kind.FRAGMENT_DEFINITION) fragments[definition.name.value] = definition;
  return { document, operation, fragments };
};
const normalized = (source: string, name?: string) => {
  const { operation, fragments } = operationOf(source, name);
  return normalizedOperation(operation, fragments);
};

describe('normalizedOperation (operation unit)', () => {
  it('ignores whitespace, comments, the operation name and the order of variable definitions', () => {
    const a = normalized('mutation Create($name: String!, $id: ID!) { create(name: $name) { id } remove(id: $id) }');
    const b = normalized(`
      # a comment
      mutation Other($id: ID!,
        $name: String!) {
        create(name: $name) { id }   remove(id: $id)
      }`);
    expect(a).toBe(b);
  });

  it('sees a changed selection set, argument or field order', () => {
    const base = normalized('mutation { create(name: "a") { id } }');
    expect(normalized('mutation { create(name: "a") { id name } }')).not.toBe(base);
    expect(normalized('mutation { create(name: "b") { id } }')).not.toBe(base);
    expect(normalized('mutation { remove(id: 1) create(name: "a") { id } }')).not.toBe(
      normalized('mutation { create(name: "a") { id } remove(id: 1) }'),
    );
  });

  it('includes the fragments the operation uses, and nothing of the other operations', () => {
    const source = `
      mutation A { create(name: "a") { ...Fields } }
      mutation B { remove(id: 1) }
      fragment Fields on Item { id ...More }
      fragment More on Item { name }
      fragment Unused on Item { price }`;
    const text = normalized(source, 'A');
    expect(text).toContain('fragment Fields on Item');
    expect(text).toContain('fragment More on Item');
    expect(text).not.toContain('Unused');
    expect(text).not.toContain('remove');
    expect(
      normalized(source.replace('fragment More on Item { name }', 'fragment More on Item { price }'), 'A'),
    ).not.toBe(text);
  });
});

describe('fieldSelection (field unit)', () => {
  it('is the selection as written with the fragments it uses, and the values of the variables it reads; empty for a leaf', () => {
    const { operation, fragments } = operationOf(
      'mutation ($v: Boolean, $n: Int) { create(name: "a") { id ...F @include(if: $v) } remove(id: 1) } fragment F on Item { name price @skip(if: $n) }',
    );
    const [create, remove] = operation.selectionSet.selections as any[];
    // A condition that would not coerce (null for Boolean!) is read, not evaluated: this cannot throw.
    expect(fieldSelection([create], fragments, { v: null, n: 2, unused: 1 })).toEqual({
      selection: '{\n  id\n  ...F @include(if: $v)\n}\nfragment F on Item {\n  name\n  price @skip(if: $n)\n}',
      variables: { v: null, n: 2 },
    });
    expect(fieldSelection([remove], fragments, {}).selection).toBe('');
  });
});

describe('the key plan reads graphql-js', () => {
  const kit = createAdapterKit(
    { store: new MemoryStore(), principal: () => 'alice', required: false },
    {
      name: 'test',
      field: 'argument',
    },
  );
  const plan = (source: string, variableValues: Record<string, unknown> = {}, header?: string) => {
    const { document, operation } = operationOf(source);
    return planOperation({ schema, document, variableValues }, operation, schema.getMutationType()!, {
      kit,
      header,
      directive: schema.getDirective('idempotent')!,
    });
  };

  it("collects root fields with graphql-js's own collectFields (graphql/execution/collectFields.js, pinned here)", () => {
    const source = `
      mutation ($skip: Boolean!) {
        ...Root
        ... on Mutation { b: remove(id: 2) @idempotent(key: "kb") }
        c: remove(id: 3) @skip(if: $skip) @idempotent(key: "kc")
        ... @include(if: false) { d: remove(id: 4) @idempotent(key: "kd") }
        a: create(name: "x") @idempotent(key: "ka") { name }
      }
      fragment Root on Mutation { a: create(name: "x") { id } }`;
    const planned = plan(source, { skip: true });
    const fields = planned.unit === 'field' ? planned.fields : [];
    expect(fields.map(({ field, run }) => [field.responseKey, field.fieldName, field.nodes.length, run?.key])).toEqual([
      ['a', 'create', 2, 'ka'],
      ['b', 'remove', 1, 'kb'],
    ]);
    const { operation, fragments } = operationOf(source);
    const collected = collectFields(
      schema,
      fragments,
      { skip: true },
      schema.getMutationType()!,
      operation.selectionSet,
    );
    expect([...collected.keys()]).toEqual(['a', 'b']);
  });

  it('K4: reads a key from a variable default and an explicit null as graphql-js coerces them', () => {
    const source = 'mutation ($k: String = "from-default") { create(name: "x", idempotencyKey: $k) { id } }';
    expect(plan(source)).toMatchObject({ unit: 'field', fields: [{ run: { key: 'from-default' } }] });
    expect(plan(source, { k: null }, 'header')).toMatchObject({ unit: 'operation', run: { key: 'header' } });
  });

  it('E4: a directive key that does not coerce is a request error with no data, as graphql-js words it', () => {
    const planned = plan('mutation ($k: String = "x") { create(name: "x") @idempotent(key: $k) { id } }', {
      k: null,
    });
    expect(planned).toMatchObject({
      unit: 'unexecutable',
      result: { errors: [{ message: 'Argument "key" of non-null type "String!" must not be null.' }] },
    });
    expect(planned.unit === 'unexecutable' && 'data' in planned.result).toBe(false);
  });
});
