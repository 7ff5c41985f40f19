ALTER TABLE `idem_key_history` ADD `waits` int DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `idem_keys` ADD `waits` int DEFAULT 0 NOT NULL;