import { runStoreConformance } from '@idem/core/conformance';
import { MemoryStore } from '@idem/core';

runStoreConformance({ name: 'MemoryStore', createStore: async () => new MemoryStore() });
