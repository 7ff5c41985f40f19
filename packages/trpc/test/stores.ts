/**
 * The stores the black-box suite runs on: one `describe.each` over these, never copies.
 */
import { MemoryStore, type IdempotencyStore } from '@idem/core';

export interface StoreTarget {
  name: string;
  open(): Promise<{ store: IdempotencyStore; close(): Promise<void> }>;
}

export const memoryTarget: StoreTarget = {
  name: 'MemoryStore',
  open: async () => ({ store: new MemoryStore(), close: async () => {} }),
};

export const storeTargets: StoreTarget[] = [memoryTarget];
