/**
 * `[ui]`: the driver's page (src/ui/, docs/driver-page.md), part of the one config schema
 * (schema.ts). Off unless `listen` is set; a page reachable from the network needs a PIN and,
 * unless allowed otherwise, TLS.
 */
import * as z from 'zod';
import { isLoopback, LISTEN_PATTERN } from '../ui/listen.js';

export const uiSchema = z
  .strictObject({
    /** host:port the page is served on, e.g. "127.0.0.1:8090" (or "0.0.0.0:8090" for the cab's Wi-Fi); absent: off. */
    listen: z.string().regex(LISTEN_PATTERN, 'expected host:port such as 127.0.0.1:8090 or 0.0.0.0:8090').optional(),
    /** File holding the PIN, 4-8 digits (0600); required unless `listen` is loopback. */
    pin_file: z.string().min(1).optional(),
    /** PEM certificate and key: the page is served over HTTPS. */
    tls_cert: z.string().min(1).optional(),
    tls_key: z.string().min(1).optional(),
    /** Serve a non-loopback address over plain HTTP (the PIN crosses the Wi-Fi readable). */
    allow_plaintext: z.boolean().default(false),
    /** Language of the page; absent: the browser's Accept-Language, then en. */
    language: z.enum(['en', 'es', 'fr']).optional(),
  })
  .superRefine((u, ctx) => {
    if ((u.tls_cert === undefined) !== (u.tls_key === undefined)) {
      ctx.addIssue({ code: 'custom', path: [u.tls_cert === undefined ? 'tls_cert' : 'tls_key'], message: 'tls_cert and tls_key go together' });
    }
    if (u.listen === undefined || isLoopback(u.listen)) return;
    if (u.pin_file === undefined) ctx.addIssue({ code: 'custom', path: ['pin_file'], message: `required when listen (${u.listen}) is not a loopback address: anyone on the network could record milestones` });
    if (u.tls_cert === undefined && !u.allow_plaintext) {
      ctx.addIssue({ code: 'custom', path: ['tls_cert'], message: `required when listen (${u.listen}) is not a loopback address (the PIN would cross the network readable); or set ui.allow_plaintext = true` });
    }
  })
  .prefault({});
