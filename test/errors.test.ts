import { describe, expect, it } from 'vitest';
import { LoadError } from '../src/buffer/store.js';
import { ConfigError } from '../src/config/load.js';
import { CronError } from '../src/cron.js';
import { type AgentError, BufferError, CliError } from '../src/errors.js';
import { MilestoneError } from '../src/milestones/record.js';
import { StopsFileError } from '../src/milestones/stops.js';
import { RouteError } from '../src/sources/routes.js';

const facts = (e: AgentError) => ({ code: e.code, exitCode: e.exitCode, retryable: e.retryable, report: e.report() });

describe('errors that end a command', () => {
  it('carry a stable code and the exit status the CLI ends with', () => {
    expect(facts(new ConfigError('/etc/a.toml', ['api: required table [api] is missing']))).toEqual({
      code: 'ECONFIG',
      exitCode: 78,
      retryable: false,
      report: '/etc/a.toml: invalid configuration\n  api: required table [api] is missing',
    });
    expect(facts(new CliError('--lat and --lon go together', 64))).toEqual({ code: 'EUSAGE', exitCode: 64, retryable: false, report: 'error: --lat and --lon go together' });
    expect(facts(new CliError('--state: expected a two-letter state or province code, got "ILL"', 65))).toMatchObject({ code: 'EDATA', exitCode: 65 });
    expect(facts(new LoadError('no load L1'))).toEqual({ code: 'ELOAD', exitCode: 65, retryable: false, report: 'error: no load L1' });
    expect(facts(new StopsFileError('s.json: x'))).toMatchObject({ code: 'ESTOPS', exitCode: 65 });
    expect(facts(new MilestoneError('load L1: no such load'))).toMatchObject({ code: 'EMILESTONE', exitCode: 65 });
    expect(facts(new CronError('minute: 61 is out of range'))).toMatchObject({ code: 'ECRON', exitCode: 78 });
    expect(facts(new RouteError('r.csv: cannot read route file (ENOENT)'))).toMatchObject({ code: 'EROUTE', exitCode: 1 });
    expect(facts(new BufferError('newer', 'b.db', 'b.db: written by a newer version'))).toMatchObject({ code: 'EBUFFER_NEWER', exitCode: 65 });
    expect(facts(new BufferError('foreign-wal', 'b.db', 'x'))).toMatchObject({ code: 'EBUFFER_FOREIGN_WAL', exitCode: 65 });
    expect(facts(new BufferError('access', 'b.db', 'x'))).toMatchObject({ code: 'EBUFFER_ACCESS', exitCode: 73 });
    expect(facts(new BufferError('locked', 'b.db', 'x'))).toMatchObject({ code: 'EBUFFER_LOCKED', exitCode: 78 });
  });
});
