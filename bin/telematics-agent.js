#!/usr/bin/env node
// `run` keeps a SIGHUP that comes before the daemon can act on it (src/cli/early-hangup.ts):
// loading the code and the config takes a moment, and SIGHUP's default action is death, which
// systemd's Restart=on-failure takes for a clean exit. Here, before the code loads, is the
// earliest a handler can be. Only for `run`: a command's SIGHUP keeps its default.
if (process.argv[2] === 'run') {
  const early = { pending: false, listener: () => (early.pending = true) };
  globalThis[Symbol.for('telematics-agent.early-hangup')] = early;
  process.on('SIGHUP', early.listener);
}
const { main } = await import('../dist/pkg/cli.js');

await main();
