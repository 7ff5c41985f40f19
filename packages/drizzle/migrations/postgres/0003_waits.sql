ALTER TABLE "idem_key_history" ADD COLUMN IF NOT EXISTS "waits" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "idem_keys" ADD COLUMN IF NOT EXISTS "waits" integer DEFAULT 0 NOT NULL;