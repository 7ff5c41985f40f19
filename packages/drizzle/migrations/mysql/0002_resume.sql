ALTER TABLE `idem_key_history` ADD `on_failure` varchar(16) DEFAULT 'replay' NOT NULL;--> statement-breakpoint
ALTER TABLE `idem_key_history` ADD `attempts` int DEFAULT 1 NOT NULL;--> statement-breakpoint
ALTER TABLE `idem_key_history` ADD `steps` longtext CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT ('[]') NOT NULL;--> statement-breakpoint
ALTER TABLE `idem_keys` ADD `on_failure` varchar(16) DEFAULT 'replay' NOT NULL;--> statement-breakpoint
ALTER TABLE `idem_keys` ADD `attempts` int DEFAULT 1 NOT NULL;--> statement-breakpoint
ALTER TABLE `idem_keys` ADD `steps` longtext CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT ('[]') NOT NULL;--> statement-breakpoint
UPDATE `idem_key_history` SET `attempts` = `takeovers` + 1 WHERE `takeovers` > 0 AND `attempts` = 1;--> statement-breakpoint
UPDATE `idem_keys` SET `attempts` = `takeovers` + 1 WHERE `takeovers` > 0 AND `attempts` = 1;