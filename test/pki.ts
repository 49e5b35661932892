import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export interface Pki {
  /** The private CA's certificate (PEM file): what api.ca_file names. */
  caFile: string;
  /** Another CA's certificate, which did not sign the server's. */
  otherCaFile: string;
  /** The server's certificate (for 127.0.0.1 and localhost, signed by the CA) and key, PEM text. */
  cert: string;
  key: string;
}

/**
 * A private CA and a server certificate it signed, made with the real openssl in `dir`: what
 * a corporate TLS-inspecting proxy or a private deployment of the service presents.
 */
export function makePki(dir: string): Pki {
  const openssl = (...args: string[]) => {
    try {
      execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
    } catch (err) {
      const e = err as NodeJS.ErrnoException & { stderr?: Buffer };
      if (e.code === 'ENOENT') throw new Error('openssl is not installed: apt-get install openssl');
      throw new Error(`openssl ${args[0]}: ${e.stderr?.toString() ?? e.message}`);
    }
  };
  const ca = (name: string) => openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2', '-subj', `/CN=${name}`, '-keyout', `${name}.key`, '-out', `${name}.pem`);
  ca('test-ca');
  ca('other-ca');
  openssl('req', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=localhost', '-keyout', 'server.key', '-out', 'server.csr');
  writeFileSync(join(dir, 'san.ext'), 'subjectAltName = IP:127.0.0.1, DNS:localhost\n');
  openssl('x509', '-req', '-in', 'server.csr', '-CA', 'test-ca.pem', '-CAkey', 'test-ca.key', '-CAcreateserial', '-days', '2', '-extfile', 'san.ext', '-out', 'server.pem');
  return {
    caFile: join(dir, 'test-ca.pem'),
    otherCaFile: join(dir, 'other-ca.pem'),
    cert: readFileSync(join(dir, 'server.pem'), 'utf8'),
    key: readFileSync(join(dir, 'server.key'), 'utf8'),
  };
}
