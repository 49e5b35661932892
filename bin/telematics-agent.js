#!/usr/bin/env node
import { main } from '../dist/pkg/cli.js';

await main();
