/**
 * The `tokengate` process: the CLI, handed the server that `serve` starts. The bin
 * (bin/tokengate.js) imports this module, as does `node src/entry.ts` from a clone. It is
 * the composition root of the command line: the CLI never imports the server's (main.ts),
 * which is loaded only when `serve` runs.
 */
import { run } from './cli/main.ts'

const code = await run(process.argv.slice(2), {
  stdout: process.stdout,
  stderr: process.stderr,
  stdin: process.stdin,
  env: process.env,
  server: () => import('./main.ts'),
})
// A failed command exits even if something it opened is still pending: a `serve` that
// could not start must never linger half-started (stdout and stderr write synchronously).
if (code !== 0) process.exit(code)
