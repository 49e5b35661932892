import { ApiClient } from '../src/api/client.js';
import type { Store } from '../src/buffer/store.js';
import type { Config } from '../src/config/schema.js';
import { Sender } from '../src/delivery/sender.js';
import { createLogger } from '../src/log.js';
import { TEST_KEY, TEST_SCAC } from './helpers.js';

const silent = createLogger({ level: 'silent', destination: process.stdout });

/** The real client of `config`'s service, with the test key unless `key` says another. */
export function testClient(config: Config, key = TEST_KEY): ApiClient {
  return new ApiClient({ baseUrl: config.api.base_url, milestonePath: config.api.milestone_path, tracePath: config.api.trace_path, scac: TEST_SCAC, subscriptionKey: key, timeoutMs: 2000 });
}

/**
 * The real client and sender of `config` in-process, with the test key, for a test that writes
 * a buffer file through its own ingest and pushes when it chooses: `get` starts them on first
 * use, `stop` stops the sender, then closes its client.
 */
export function inProcessSender(store: Store, config: Config): { get: () => Sender; stop: () => Promise<void> } {
  let client: ApiClient | undefined;
  let sender: Sender | undefined;
  return {
    get: () => {
      if (!sender) {
        client = testClient(config);
        sender = new Sender({ store, client, config, deviceId: 'dev', log: silent });
        sender.start();
      }
      return sender;
    },
    stop: async () => {
      await sender?.stop();
      await client?.close();
      sender = undefined;
      client = undefined;
    },
  };
}
