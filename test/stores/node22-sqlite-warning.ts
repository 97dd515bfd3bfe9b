/**
 * Preloaded with `--import` (NODE_OPTIONS, so every process and worker thread of a `serve`
 * runs it first): Node 22's node:sqlite ExperimentalWarning on Node 24, which no longer
 * emits it. Node 22 emits it once per thread, when the builtin is first loaded: during the
 * ESM graph's loading for a static `import 'node:sqlite'` (before any module of the graph
 * has run), or at `process.getBuiltinModule('node:sqlite')`.
 *
 * A warning that reaches Node's own emitWarning (no filter in front of it) is written to
 * fd 2 at once: a worker thread's stderr would reach the process's only later, and a
 * process that exits first loses it (the flaky CI failure of test/server/start-failure).
 */
import { writeSync } from 'node:fs'
import { registerHooks } from 'node:module'
import { threadId } from 'node:worker_threads'

const WARNING = 'SQLite is an experimental feature and might change at any time'

const nodeEmitWarning = process.emitWarning
process.emitWarning = function printedAtOnce(this: unknown, warning, ...rest) {
  const text = typeof warning === 'string' ? warning : warning?.message
  if (text === WARNING) {
    writeSync(
      2,
      `unfiltered ExperimentalWarning (pid ${process.pid}, thread ${threadId}): ${text}\n`,
    )
    return
  }
  return (nodeEmitWarning as (...args: unknown[]) => void).call(this, warning, ...rest)
} as typeof process.emitWarning

let loaded = false
function loadingSqlite(): void {
  if (loaded) return
  loaded = true
  process.emitWarning(WARNING, 'ExperimentalWarning')
}

registerHooks({
  load(url, context, nextLoad) {
    if (url === 'node:sqlite') loadingSqlite()
    return nextLoad(url, context)
  },
})

const getBuiltinModule = process.getBuiltinModule
process.getBuiltinModule = function loadingBuiltin(this: unknown, id: string) {
  if (id === 'node:sqlite' || id === 'sqlite') loadingSqlite()
  return getBuiltinModule.call(this, id)
} as typeof process.getBuiltinModule
