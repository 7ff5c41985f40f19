// drizzle-kit config for the PostgreSQL migrations: `npx drizzle-kit generate --config drizzle.postgres.config.ts`
import { defineConfig } from 'drizzle-kit';

export default defineConfig({
  dialect: 'postgresql',
  schema: './src/pg/schema.ts',
  out: './migrations/postgres',
});
