/**
 * The agent's version: the one home of the string every place shows (`--version`, the
 * `agent started` log line, `status`, `/metrics`, the User-Agent of every request). It is
 * package.json's, written into the bundle at build time (scripts/bundle.mjs, esbuild's
 * `define`), so the code that runs names its own version, whatever package.json may sit
 * beside it; code run from tsc's output or the tests reads package.json.
 */
import { packageVersion } from './paths.js';

declare const __TELEMATICS_AGENT_VERSION__: string | undefined;

export const VERSION: string = typeof __TELEMATICS_AGENT_VERSION__ === 'string' ? __TELEMATICS_AGENT_VERSION__ : packageVersion();

/** Sent with every request to the service: which agent (and version) the carrier runs. */
export const USER_AGENT = `telematics-agent/${VERSION}`;
