CREATE TABLE IF NOT EXISTS "idem_key_history" (
	"scope" text NOT NULL,
	"key" text NOT NULL,
	"generation" integer NOT NULL,
	"fingerprint" text,
	"state" text NOT NULL,
	"token" text NOT NULL,
	"created_at" timestamp (3) with time zone NOT NULL,
	"lease_until" timestamp (3) with time zone NOT NULL,
	"expires_at" timestamp (3) with time zone NOT NULL,
	"completed_at" timestamp (3) with time zone,
	"archived_at" timestamp (3) with time zone NOT NULL,
	"takeovers" integer NOT NULL,
	"outcome_kind" text,
	"outcome_status" integer,
	"body" text,
	"reused_at" timestamp (3) with time zone NOT NULL,
	CONSTRAINT "idem_key_history_scope_key_generation_pk" PRIMARY KEY("scope","key","generation")
);
--> statement-breakpoint
CREATE TABLE IF NOT EXISTS "idem_keys" (
	"scope" text NOT NULL,
	"key" text NOT NULL,
	"generation" integer NOT NULL,
	"fingerprint" text,
	"state" text NOT NULL,
	"token" text NOT NULL,
	"created_at" timestamp (3) with time zone NOT NULL,
	"lease_until" timestamp (3) with time zone NOT NULL,
	"expires_at" timestamp (3) with time zone NOT NULL,
	"completed_at" timestamp (3) with time zone,
	"archived_at" timestamp (3) with time zone,
	"takeovers" integer DEFAULT 0 NOT NULL,
	"outcome_kind" text,
	"outcome_status" integer,
	"body" text,
	CONSTRAINT "idem_keys_scope_key_pk" PRIMARY KEY("scope","key")
);
--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "idem_key_history_archived_at_idx" ON "idem_key_history" USING btree ("archived_at");--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "idem_keys_expires_at_idx" ON "idem_keys" USING btree ("expires_at") WHERE "state" <> 'archived';--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "idem_keys_archived_at_idx" ON "idem_keys" USING btree ("archived_at") WHERE "state" = 'archived';