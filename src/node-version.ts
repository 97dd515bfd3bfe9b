/**
 * The oldest Node the built package runs on: 22.13, the first release with node:sqlite
 * unflagged. The package entry (index.ts) imports this module first and the bin imports it
 * before anything else, so an older Node gets this one line and exit code 1, instead of a
 * link error or a crash on a missing API with a stack trace. Why exit rather than throw: the
 * runtime cannot be fixed from inside the process, and Node prints a thrown error with its
 * stack and source excerpt around the line. Plain code that any Node parses.
 */
const [major = 0, minor = 0] = process.versions.node.split('.').map(Number)
if (major < 22 || (major === 22 && minor < 13)) {
  process.stderr.write(
    `tokengate: Node 22.13 or newer is required (this is ${process.versions.node}); install Node 22 or 24 LTS\n`,
  )
  process.exit(1)
}
