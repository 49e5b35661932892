/**
 * `validate-config`: every problem of the config file, and what the daemon needs at start
 * (the key, the buffer's directory), checked before a restart finds them.
 */
import type { Command } from 'commander';
import { accessProblem } from '../../buffer/db.js';
import { redactProxy } from '../../api/transport.js';
import { ConfigError, keyFileWarning, preflight } from '../../config/load.js';
import { simulatorWarnings } from '../../config/fake-data.js';
import { describeDeviceZone } from '../../geo/device-zone.js';
import { configOption, err, load, out } from '../common.js';

export function addValidateConfigCommand(program: Command): void {
  program
    .command('validate-config')
    .description(
      "check the config file (and that the subscription key, api.ca_file, the sources' files, [ui]'s PIN file and certificate, [fleet]'s files and the buffer's directory can be used); print every problem, exit 78 if any",
    )
    .addOption(configOption())
    .option('--json', 'print the effective configuration (defaults filled in, key omitted) as JSON')
    .action((opts: { config?: string; json?: boolean }) => {
      const loaded = load(opts.config);
      // What the daemon will need at start, checked as the user this runs as: every problem at once.
      const buffer = loaded.config.buffer.path;
      const key = preflight(loaded, () => {
        const problem = buffer === ':memory:' ? undefined : accessProblem(buffer);
        if (problem) throw new ConfigError(loaded.file, [`buffer.path: ${buffer}: ${problem}; the daemon could not open its buffer`]);
      });
      const keyWarning = keyFileWarning(key);
      if (keyWarning) err(`warning: subscription key: ${keyWarning}`);
      for (const w of simulatorWarnings(loaded.config, loaded.origins)) err(`warning: ${w}`);
      if (opts.json) {
        const { subscription_key: _omit, ...api } = loaded.config.api;
        if (api.proxy) api.proxy = redactProxy(api.proxy);
        // A password in the service's URL (a gateway's basic auth) is masked as the proxy's is.
        if (new URL(api.base_url).password) api.base_url = redactProxy(api.base_url);
        out(JSON.stringify({ ...loaded.config, api, device_id: loaded.deviceId }, null, 2));
      } else {
        const dropIns = loaded.dropIns?.length ? ` with ${loaded.dropIns.join(', ')}` : '';
        out(`${loaded.file}${dropIns}: ok (device ${loaded.deviceId}, ${loaded.config.sources.length} source(s), key from ${key.origin}, device zone ${describeDeviceZone()})`);
      }
    });
}
