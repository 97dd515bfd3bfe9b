/**
 * The two expected ways a CLI command ends badly. `run()` maps them to exit codes and prints
 * their message without a stack trace; anything else is a bug or an unreachable store.
 */

/** Bad input: unknown command or flag, missing argument, bad value. Exit code 2. */
export class UsageError extends Error {
  override readonly name = 'UsageError'
}

/** The operation could not be done: not found, conflict, refused by state. Exit code 1. */
export class CommandFailure extends Error {
  override readonly name = 'CommandFailure'
}
