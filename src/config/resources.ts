/**
 * Which resources the configured sources tag their readings with. A load started on any
 * other resource (a typo, a trailer id where the truck's was meant) gets no position at all,
 * and nothing said so: the readings of the truck are kept for no load and dropped.
 */
import type { Config } from './schema.js';

/** The resources named in the config, or undefined when a source names its own per reading (exec, mqtt, module). */
export function configuredResources(config: Config): Set<string> | undefined {
  const ids = new Set<string>();
  for (const s of config.sources) {
    if (s.type === 'exec' || s.type === 'mqtt' || s.type === 'module') return undefined;
    if (s.type === 'onewire') for (const id of Object.values(s.sensors)) ids.add(id);
    else ids.add(s.resource_id);
  }
  return ids;
}

/** A load's resource no configured source feeds: the ids they do tag, and one differing only in case; else undefined (worded in src/milestones/warnings.ts). */
export function unfedResource(config: Config, resourceId: string): { resourceId: string; tags: string[]; like?: string } | undefined {
  const ids = configuredResources(config);
  if (!ids || ids.has(resourceId)) return undefined;
  const tags = [...ids];
  return { resourceId, tags, like: tags.find((n) => n.toLowerCase() === resourceId.toLowerCase()) };
}
