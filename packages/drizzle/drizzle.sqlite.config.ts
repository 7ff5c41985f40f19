// drizzle-kit config for the SQLite migrations: `npx drizzle-kit generate --config drizzle.sqlite.config.ts`
import { defineConfig } from 'drizzle-kit';

export default defineConfig({
  dialect: 'sqlite',
  schema: './src/sqlite/schema.ts',
  out: './migrations/sqlite',
});
