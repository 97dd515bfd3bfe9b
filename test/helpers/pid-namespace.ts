/**
 * Processes as PID 1 of a new PID namespace (`unshare --pid --fork --mount-proc`, util-linux;
 * needs root or user namespaces), the way a container runs its entry point.
 */
import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'

/**
 * The wrap for `spawnServe`: what follows runs as PID 1 of a fresh PID namespace. `unshare`
 * ignores SIGINT and SIGTERM while it waits: signal its child (`childrenOf`) to stop it.
 */
export const AS_PID_1 = ['unshare', '--pid', '--fork', '--mount-proc', '--'] as const

/** Why PID namespaces cannot be made here, or false. Throws under `CI=true` instead. */
export function pidNamespaceSkip(): string | false {
  const reason =
    process.platform !== 'linux'
      ? 'PID namespaces are Linux only'
      : spawnSync('unshare', ['--pid', '--fork', '--mount-proc', 'true']).status === 0
        ? undefined
        : 'unshare --pid --fork --mount-proc fails here (util-linux, root or user namespaces)'
  if (reason === undefined) return false
  if (process.env.CI === 'true') throw new Error(`CI=true but ${reason}`)
  return reason
}

/** The process's PIDs from the outermost namespace inwards (`NSpid` of /proc/<pid>/status). */
export function namespacePids(pid: number): number[] {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith('NSpid:'))
  return (line ?? '').split(/\s+/).slice(1).filter(Boolean).map(Number)
}
