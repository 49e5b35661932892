/**
 * The files of `[ui]` (the driver's page), checked before the daemon starts or takes a
 * reload, as api.ca_file is: a PIN file that cannot be read or is not 4-8 digits, a
 * certificate or key that cannot be read or parsed, or a key that is not the certificate's,
 * is a problem of the config naming the field (exit 78), not a page that silently never
 * comes up. The PIN and the key never appear in a message.
 */
import { createPrivateKey, type KeyObject, X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { readCaFile } from '../api/transport.js';
import { readPin } from '../ui/auth.js';
import type { Config } from './schema.js';

export function uiFileProblems(ui: Config['ui']): string[] {
  // A page that is off reads none of its files.
  if (ui.listen === undefined) return [];
  const problems: string[] = [];
  if (ui.pin_file !== undefined) {
    try {
      readPin(ui.pin_file);
    } catch (err) {
      problems.push((err as Error).message);
    }
  }
  if (ui.tls_cert === undefined || ui.tls_key === undefined) return problems;
  let cert: X509Certificate | undefined;
  try {
    cert = new X509Certificate(readCaFile(ui.tls_cert).split(/(?<=-----END CERTIFICATE-----)/)[0]);
  } catch (err) {
    problems.push(`ui.tls_cert: ${(err as Error).message}`);
  }
  let key: KeyObject | undefined;
  try {
    key = createPrivateKey(readFileSync(ui.tls_key));
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    // Node's parse errors name the format, never the key's bytes.
    problems.push(e.syscall ? `ui.tls_key: cannot read ${ui.tls_key} (${e.code})` : `ui.tls_key: ${ui.tls_key} holds no private key that can be read (${e.code ?? e.message})`);
  }
  if (cert && key && !cert.checkPrivateKey(key)) problems.push(`ui.tls_key: ${ui.tls_key} is not the key of ui.tls_cert (${ui.tls_cert})`);
  return problems;
}
