/**
 * What keeps a device from shipping made-up data: the installed config (config/agent.toml)
 * holds placeholders that fail validation until edited, and a simulator source (made-up
 * positions and temperatures, sent as the truck's own) is warned about everywhere but in the
 * demo, which builds its config without loading a file.
 */
import type { Config } from './schema.js';
import { formatPath } from '../validation.js';
import type { Origins } from './drop-ins.js';

/** The placeholder of the installed config: refused wherever it is left. */
export const PLACEHOLDER = 'CHANGE-ME';

/** Every value still the placeholder (parsed TOML), as a problem: the lines to edit before the agent starts. */
export function placeholderProblems(raw: unknown, path: Array<string | number> = []): string[] {
  if (raw === PLACEHOLDER) return [`${formatPath(path)}: still "${PLACEHOLDER}", the installed config's placeholder: set it (docs/configuration.md, "The installed config")`];
  if (Array.isArray(raw)) return raw.flatMap((v, i) => placeholderProblems(v, [...path, i]));
  if (typeof raw === 'object' && raw !== null && !(raw instanceof Date)) return Object.entries(raw).flatMap(([k, v]) => placeholderProblems(v, [...path, k]));
  return [];
}

/** A warning for each simulator source, naming where it is configured. */
export function simulatorWarnings(config: Config, origins?: Origins): string[] {
  return config.sources.flatMap((s, i) => {
    if (s.type !== 'simulator') return [];
    const at = origins?.where(`sources[${i}]`);
    return [
      `${at ? `${at}: ` : ''}sources[${i}]: a simulator source: its positions and temperatures are made up (route ${s.route}) and are sent to the service as those of ${s.resource_id}; for trying the agent out and tests only, remove it on a device`,
    ];
  });
}
