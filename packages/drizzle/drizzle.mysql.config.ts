// drizzle-kit config for the MySQL migrations: `npx drizzle-kit generate --config drizzle.mysql.config.ts`
import { defineConfig } from 'drizzle-kit';

export default defineConfig({
  dialect: 'mysql',
  schema: './src/mysql/schema.ts',
  out: './migrations/mysql',
});
