CREATE INDEX IF NOT EXISTS "idem_keys_takeover_idx" ON "idem_keys" USING btree ("lease_until") WHERE "takeovers" > 0;--> statement-breakpoint
DO $$ BEGIN IF current_setting('server_version_num')::int >= 140000 THEN EXECUTE 'CREATE STATISTICS IF NOT EXISTS "idem_keys_operation_state" (mcv) ON "state", (substr("scope", strpos("scope", ''/'') + 1)) FROM "idem_keys"'; END IF; END $$;
