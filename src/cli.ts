/**
 * The `telematics-agent` command's entry: bin/telematics-agent.js runs `main` from the bundle
 * built from this file (scripts/bundle.mjs). The program is src/cli/program.ts, each command
 * a file in src/cli/commands/.
 */
export { buildProgram, main } from './cli/program.js';
