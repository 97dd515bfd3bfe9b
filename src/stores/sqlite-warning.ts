/**
 * Node 22 marks node:sqlite experimental and says so, two lines on stderr, in every process
 * that opens the embedded store: every CLI command, every worker. tokengate depends on it by
 * design (docs/library.md), so the bin, the workers and the store's writer thread drop that
 * one warning; every other warning is printed as usual. The library leaves its host
 * process's warnings alone (the writer thread is tokengate's own). Node 22 warns while it
 * loads node:sqlite, so no module loads it with the module graph (a static import would, before
 * this filter runs): sqlite.ts and owner-lock.ts take it with process.getBuiltinModule.
 */
const emitWarning = process.emitWarning
process.emitWarning = function emitUnlessSqlite(this: unknown, warning, ...rest) {
  const text = typeof warning === 'string' ? warning : warning?.message
  if (text?.startsWith('SQLite is an experimental feature')) return
  return (emitWarning as (...args: unknown[]) => void).call(this, warning, ...rest)
} as typeof process.emitWarning
