/**
 * The live part of the page, as one SSE message: the link line and each shown milestone's
 * state, in the client's language. The script (assets.ts) puts them in place; a milestone it
 * does not show yet makes it reload the page.
 */
import { linkText, stateText, viewZone } from './html.js';
import type { translator } from './i18n.js';
import type { DriverView } from './view.js';

export function liveEvent(t: ReturnType<typeof translator>, view: DriverView): string {
  const zone = viewZone(view);
  return JSON.stringify({
    online: view.link.online,
    waiting: view.link.waiting,
    link: linkText(t, view.link, zone),
    milestones: view.loads.flatMap((l) => l.milestones.map((m) => ({ id: m.id, state: m.state, text: stateText(t, m) }))),
  });
}
