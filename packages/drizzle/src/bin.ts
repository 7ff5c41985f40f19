#!/usr/bin/env node
// The `idem` command of @idem/drizzle; everything but the process wiring lives in cli.ts.
import { runCli } from './cli.js';

process.exitCode = await runCli(process.argv.slice(2));
