/**
 * `npx tokengate serve` and `npm start` run the bin through `sh -c` (npm's script shell), and
 * npm passes SIGTERM to that shell only: `sh` (dash) dies of it without passing it on, and the
 * server lived on as an orphan holding the port. So when our parent is the shell npm started
 * for us, its exit is a stop request like SIGTERM. Only then: a server started in the
 * background on purpose (`tokengate serve &`, nohup) must outlive the shell that started it.
 *
 * Linux only (reads /proc); elsewhere nothing is watched.
 */
import { readFileSync } from 'node:fs'

/** How often the parent is looked at, in ms. */
const WATCH_INTERVAL_MS = 500

/**
 * Calls `onGone` once when the shell npm ran us from exits; a no-op unless npm's script
 * shell is our parent. Returns the function that stops watching.
 */
export function watchNpmShell(
  env: Readonly<Record<string, string | undefined>>,
  onGone: () => void,
): () => void {
  const parent = parentPid()
  if (parent === undefined || !isNpmScriptShell(parent, env.npm_lifecycle_script)) {
    return () => {}
  }
  const timer = setInterval(() => {
    if (parentPid() === parent) return
    clearInterval(timer)
    onGone()
  }, WATCH_INTERVAL_MS)
  timer.unref()
  return () => clearInterval(timer)
}

/** Our parent's pid as the kernel has it now (`process.ppid` is read once, at start). */
function parentPid(): number | undefined {
  try {
    const stat = readFileSync('/proc/self/stat', 'utf8')
    // `pid (comm) state ppid ...`; comm may hold spaces and parentheses: split after the last ')'.
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1])
  } catch {
    return undefined
  }
}

/** `sh -c '<npm_lifecycle_script> <args>'`: the shell npm's run-script starts. */
function isNpmScriptShell(pid: number, script: string | undefined): boolean {
  if (!script) return false
  try {
    const [, flag, command] = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')
    return flag === '-c' && command?.startsWith(script) === true
  } catch {
    return false
  }
}
