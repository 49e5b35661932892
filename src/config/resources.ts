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

/** A warning for a load's resource no configured source feeds, else undefined. */
export function unfedResource(config: Config, resourceId: string): string | undefined {
  const ids = configuredResources(config);
  if (!ids || ids.has(resourceId)) return undefined;
  const names = [...ids];
  const like = names.find((n) => n.toLowerCase() === resourceId.toLowerCase());
  const fed = names.length > 0 ? `the sources tag their readings ${names.map((n) => JSON.stringify(n)).join(', ')}` : 'no source is configured';
  return `resourceId ${JSON.stringify(resourceId)}: ${fed}, so this load gets no positions${like ? ` (did you mean ${JSON.stringify(like)}? resource ids are case-sensitive)` : ''}; end it and start it on the right resource, or add a source for it`;
}
