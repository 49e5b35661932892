/**
 * Exit statuses, from sysexits.h where one fits, so scripts and systemd can tell
 * "fix the config" (78, which the unit refuses to restart on) from "try again". Each failure
 * carries its status (`exitCode` of the classes in src/errors.ts); this is the one list.
 */
export const EXIT = {
  OK: 0,
  /** Something failed at run time (network, disk); trying again may work. */
  FAILURE: 1,
  /** `status`: the daemon is not running (as in LSB init scripts). */
  NOT_RUNNING: 3,
  /** `status`: the daemon runs, but delivery is paused: the service refuses the key, SCAC or address. */
  PAUSED: 5,
  /** `status`: the daemon runs and delivers, but a source is unhealthy (a device gone, a command that exits). */
  SOURCE_UNHEALTHY: 6,
  /** EX_USAGE: unknown command or option, missing argument. */
  USAGE: 64,
  /**
   * EX_DATAERR: the input named on the command line is wrong (unknown load, bad stops file,
   * bad time, unknown code), or the buffer's content cannot be used (corrupt, written by a
   * newer version, a WAL of another database).
   */
  DATA: 65,
  /** EX_CANTCREAT: the buffer (or its directory) cannot be opened or created by this user. */
  CANTCREAT: 73,
  /**
   * EX_TEMPFAIL: the buffer needs the schema of this (newer) version and the daemon that holds
   * it is older: a command that would migrate it refuses (restart the service to upgrade), and
   * one that reads it says so when it cannot read it as it is.
   */
  TEMPFAIL: 75,
  /** EX_CONFIG: the configuration is invalid, the key is missing, or another daemon holds the buffer. */
  CONFIG: 78,
} as const;
