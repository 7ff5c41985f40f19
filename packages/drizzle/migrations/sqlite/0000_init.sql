CREATE TABLE IF NOT EXISTS `idem_key_history` (
	`scope` text NOT NULL,
	`key` text NOT NULL,
	`generation` integer NOT NULL,
	`fingerprint` text,
	`state` text NOT NULL,
	`token` text NOT NULL,
	`created_at` integer NOT NULL,
	`lease_until` integer NOT NULL,
	`expires_at` integer NOT NULL,
	`completed_at` integer,
	`archived_at` integer NOT NULL,
	`takeovers` integer NOT NULL,
	`outcome_kind` text,
	`outcome_status` integer,
	`body` text,
	`reused_at` integer NOT NULL,
	PRIMARY KEY(`scope`, `key`, `generation`)
);
--> statement-breakpoint
CREATE INDEX IF NOT EXISTS `idem_key_history_archived_at_idx` ON `idem_key_history` (`archived_at`);--> statement-breakpoint
CREATE TABLE IF NOT EXISTS `idem_keys` (
	`scope` text NOT NULL,
	`key` text NOT NULL,
	`generation` integer NOT NULL,
	`fingerprint` text,
	`state` text NOT NULL,
	`token` text NOT NULL,
	`created_at` integer NOT NULL,
	`lease_until` integer NOT NULL,
	`expires_at` integer NOT NULL,
	`completed_at` integer,
	`archived_at` integer,
	`takeovers` integer DEFAULT 0 NOT NULL,
	`outcome_kind` text,
	`outcome_status` integer,
	`body` text,
	PRIMARY KEY(`scope`, `key`)
);
--> statement-breakpoint
CREATE INDEX IF NOT EXISTS `idem_keys_expires_at_idx` ON `idem_keys` (`expires_at`) WHERE "state" <> 'archived';--> statement-breakpoint
CREATE INDEX IF NOT EXISTS `idem_keys_archived_at_idx` ON `idem_keys` (`archived_at`) WHERE "state" = 'archived';