/** The service's client for a loaded config's [api] and the key found for it. */
import type { KeyLookup, LoadedConfig } from '../config/load.js';
import type { Logger } from '../log.js';
import { resolveCa } from '../config/load.js';
import { ApiClient } from './client.js';

/** A client for `loaded`'s [api] (throws a ConfigError when api.ca_file cannot be used). */
export function clientOf(loaded: LoadedConfig, key: KeyLookup, log?: Logger): ApiClient {
  const { api } = loaded.config;
  return new ApiClient({
    baseUrl: api.base_url,
    milestonePath: api.milestone_path,
    tracePath: api.trace_path,
    scac: api.scac,
    subscriptionKey: key.key,
    timeoutMs: api.timeout_s * 1000,
    connectTimeoutMs: api.connect_timeout_s * 1000,
    proxy: api.proxy,
    ca: resolveCa(loaded),
    extraFields: api.extra_fields,
    compression: { method: api.compress, minBytes: api.compress_min_bytes },
    tlsHello: api.tls_hello,
    onCompressionRefused: (answer) => log?.warn({ answer }, `the service refuses gzip-encoded bodies (${answer}): sending them uncompressed from now on; set api.compress = "none"`),
  });
}
