ALTER TABLE `idem_key_history` ADD `on_failure` text DEFAULT 'replay' NOT NULL;--> statement-breakpoint
ALTER TABLE `idem_key_history` ADD `attempts` integer DEFAULT 1 NOT NULL;--> statement-breakpoint
ALTER TABLE `idem_key_history` ADD `steps` text DEFAULT '[]' NOT NULL;--> statement-breakpoint
ALTER TABLE `idem_keys` ADD `on_failure` text DEFAULT 'replay' NOT NULL;--> statement-breakpoint
ALTER TABLE `idem_keys` ADD `attempts` integer DEFAULT 1 NOT NULL;--> statement-breakpoint
ALTER TABLE `idem_keys` ADD `steps` text DEFAULT '[]' NOT NULL;--> statement-breakpoint
UPDATE `idem_key_history` SET `attempts` = `takeovers` + 1 WHERE `takeovers` > 0 AND `attempts` = 1;--> statement-breakpoint
UPDATE `idem_keys` SET `attempts` = `takeovers` + 1 WHERE `takeovers` > 0 AND `attempts` = 1;