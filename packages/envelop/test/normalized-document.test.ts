/** F1 for GraphQL: what the fingerprint sees of a document, and which root fields execute. */
import { describe, expect, it } from 'vitest';
import { buildSchema, parse, type OperationDefinitionNode } from 'graphql';
import { effectiveSelection, fragmentsOf, normalizedOperation } from '../src/normalized-document.ts';
import { collectRootFields } from '../src/root-fields.ts';

const schema = buildSchema(`
  type Query { ok: Boolean }
  type Item { id: ID! name: String price: Int }
  type Mutation { create(name: String!): Item remove(id: ID!): Boolean }
`);
const operationOf = (source: string, name?: string) => {
  const document = parse(source);
  const operation = document.definitions.find(
    (definition): definition is OperationDefinitionNode =>
      definition.kind === 'OperationDefinition' && (name === undefined || definition.name?.value === name),
  )!;
  return { document, operation, fragments: fragmentsOf(document) };
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

describe('effectiveSelection (field unit)', () => {
  it('is the printed selection set with its fragments; empty for a leaf field', () => {
    const { operation, fragments } = operationOf(
      'mutation { create(name: "a") { id ...F } remove(id: 1) } fragment F on Item { name }',
    );
    const [create, remove] = collectRootFields(
      schema,
      schema.getMutationType()!,
      operation.selectionSet,
      fragments,
      {},
    );
    expect(effectiveSelection(create!.nodes, fragments, {}).selection).toBe(
      '{\n  id\n  ...F\n}\nfragment F on Item {\n  name\n}',
    );
    expect(effectiveSelection(remove!.nodes, fragments, {}).selection).toBe('');
  });
});

describe('collectRootFields', () => {
  it('expands fragments, applies @skip/@include, and merges nodes under one response key', () => {
    const { operation, fragments } = operationOf(`
      mutation ($skip: Boolean!) {
        ...Root
        ... on Mutation { b: remove(id: 2) }
        c: remove(id: 3) @skip(if: $skip)
        ... @include(if: false) { d: remove(id: 4) }
        a: create(name: "x") { name }
      }
      fragment Root on Mutation { a: create(name: "x") { id } }`);
    const fields = collectRootFields(schema, schema.getMutationType()!, operation.selectionSet, fragments, {
      skip: true,
    });
    expect(fields.map((field) => [field.responseKey, field.fieldName, field.nodes.length])).toEqual([
      ['a', 'create', 2],
      ['b', 'remove', 1],
    ]);
  });
});
