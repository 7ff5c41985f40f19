ALTER TABLE `idem_key_history` ADD `waits` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `idem_keys` ADD `waits` integer DEFAULT 0 NOT NULL;