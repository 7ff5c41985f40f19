/** E2/E4: what is stored of a GraphQL result, and how a replay is rebuilt from it. */
import { describe, expect, it } from 'vitest';
import { GraphQLError, parse, Source } from 'graphql';
import { createDefaultMaskError } from '@envelop/core';
import { fromStoredResult, graphqlErrorCodec, toStoredResult } from '../src/graphql-core/stored-result.ts';

const source = new Source('mutation {\n  charge { id }\n}');
const document = parse(source);
const fieldNode = (document.definitions[0] as any).selectionSet.selections[0];

describe('stored results', () => {
  it('survive a JSON round trip with data, errors, paths, locations, extensions and key order', () => {
    const result = {
      errors: [
        new GraphQLError('Forbidden', {
          nodes: [fieldNode],
          path: ['charge'],
          extensions: { code: 'FORBIDDEN', http: { status: 403 } },
        }),
      ],
      data: { charge: null },
    };
    const replayed = fromStoredResult(JSON.parse(JSON.stringify(toStoredResult(result))), source);

    expect(JSON.stringify(replayed)).toBe(JSON.stringify(result));
    expect(replayed.errors?.[0]).toBeInstanceOf(GraphQLError);
    expect(replayed.errors?.[0]?.locations).toEqual([{ line: 2, column: 3 }]);
  });

  it('remember that an error was unexpected, so error masking hides the replay as it hid the original', () => {
    const mask = createDefaultMaskError(false);
    const unexpected = new GraphQLError('db password is hunter2', {
      nodes: [fieldNode],
      path: ['charge'],
      originalError: new TypeError('db password is hunter2'),
    });
    const expected = new GraphQLError('Card declined', { path: ['charge'] });
    const replayed = fromStoredResult(
      JSON.parse(JSON.stringify(toStoredResult({ errors: [unexpected, expected], data: { charge: null } }))),
      source,
    );

    expect(replayed.errors?.map((error) => mask(error, 'Unexpected error.').message)).toEqual([
      'Unexpected error.',
      'Card declined',
    ]);
  });

  it('drop locations a reformatted retry cannot hold, and keep the rest', () => {
    const stored = { errors: [{ message: 'boom', locations: [{ line: 9, column: 1 }], path: ['charge'] }] };
    const [error] = fromStoredResult(stored, source).errors ?? [];
    expect(error?.locations).toBeUndefined();
    expect(error?.path).toEqual(['charge']);
  });

  it('store what an execute function threw with its status, and rebuild it as a GraphQLError', () => {
    const codec = graphqlErrorCodec(source);
    const description = codec.describe(new Error('schema is invalid'));
    expect(description).toMatchObject({ code: 'INTERNAL_SERVER_ERROR', status: 500, message: 'schema is invalid' });
    const revived = codec.revive(JSON.parse(JSON.stringify(description))) as GraphQLError;
    expect(revived).toBeInstanceOf(GraphQLError);
    expect(revived.originalError?.message).toBe('schema is invalid');
  });
});
