#!/usr/bin/env -S node --max-semi-space-size=8
// The `tokengate` bin. From the package it runs the built JavaScript (dist/); in a clone of
// the repository, where src/ exists, it runs the TypeScript sources directly.
//
// No static import here: this file must parse and run on any Node, so that an old one gets
// the one-line message below instead of a link error (e.g. `enableCompileCache` on Node 20).
//
// The flags are PRODUCTION_NODE_FLAGS (src/lib/serving-process.ts; a test checks they agree).
// Why --max-semi-space-size=8: filling the lookup cache is almost all survivors, so V8 grows
// the young generation to its 128 MB maximum and keeps it there under load; 8 MB semi-spaces
// hold it at 16 MB (RSS with 100,000 cached PATs: ~238 -> ~157 MB, bench/memory.bench.ts) for
// more frequent, short young collections (no throughput change beyond the benchmark's noise).
// Not --no-concurrent-recompilation: it saved ~18 MB of compiler threads' malloc arenas, but
// ran every optimizing compile on the event loop, a 40 ms stall at p99 (bench/README.md).
// `env -S` splits the flag off (GNU coreutils 8.30+); where `env` has no -S, start
// `node --max-semi-space-size=8 bin/tokengate.js` or set NODE_OPTIONS=--max-semi-space-size=8
// (docs/scale-out.md).

// Why MALLOC_ARENA_MAX=2 for `serve`: glibc gives threads that allocate malloc arenas of their
// own (up to 8 per core) and keeps in each what was freed there: V8's compiler and GC helpers,
// the libuv pool and the SQLite writer thread held 31-34 MB in 7 arenas, 6-13 MB in 2
// (bench/README.md, "Memory"). Why MALLOC_MMAP_THRESHOLD_=32768: glibc otherwise raises its
// mmap threshold to the size of each large block freed (up to 32 MB), so the cache's typed
// arrays, replaced as its tables grow, land in the main heap and leave holes it never returns:
// malloc_trim(0) on an idle served process freed 33 MB (bench/README.md, issue #36). A fixed
// threshold keeps large blocks in mappings of their own, returned when freed; 32 KB, not 128,
// because V8's compilers take their working memory in 32 KB blocks, and those freed stayed in
// the malloc arenas as holes (11 -> 2 MB in the compiler threads' arena, 28 -> 23 MB in the
// main heap; peak RSS 191-197 -> 181-186 MB in the memory bench). The price: a fresh process's
// first 20,000 requests cost ~4 % more CPU (the mappings); none per request once warm.
// glibc reads the variables only as a process starts, so `serve` starts itself again with them
// (execve: the same pid, Node flags and arguments). An operator's own values are kept; not on
// Linux, or on a Node without process.execve, no change.
const MALLOC_ENV = { MALLOC_ARENA_MAX: '2', MALLOC_MMAP_THRESHOLD_: '32768' }
if (
  process.platform === 'linux' &&
  process.argv.slice(2).includes('serve') &&
  Object.keys(MALLOC_ENV).some((name) => process.env[name] === undefined) &&
  typeof process.execve === 'function'
) {
  process.execve(
    process.execPath,
    // argv0 as the process was started (`node`, not the resolved path): ps and the image's
    // PID 1 check see the same command line as before the restart.
    [process.argv0, ...process.execArgv, ...process.argv.slice(1)],
    { ...MALLOC_ENV, ...process.env },
  )
}

const fromSources = await exists(new URL('../src/entry.ts', import.meta.url))
if (fromSources) {
  // The repository runs its TypeScript directly: type stripping needs Node 24.12.
  const [major, minor] = process.versions.node.split('.').map(Number)
  if (major < 24 || (major === 24 && minor < 12)) {
    process.stderr.write(
      `tokengate: Node 24.12 or newer is required to run the sources (this is ${process.versions.node}); npm ci installs it (the node dev dependency)\n`,
    )
    process.exit(1)
  }
} else {
  // The package's one rule (22.13, node:sqlite), also checked by `import 'tokengate'`.
  await import('../dist/node-version.js')
}
// Before the CLI's modules load node:sqlite: Node 22 warns as it loads it (sqlite-warning.ts).
await import(fromSources ? '../src/stores/sqlite-warning.ts' : '../dist/stores/sqlite-warning.js')

// Why: start-up is dominated by loading ~360 modules (our code, Fastify, pino, the store);
// Node's compile cache keeps V8 code (and stripped TypeScript) between runs, so only the
// first start after an upgrade compiles everything. The cache lives in the user's own cache
// directory, not in a world-writable temp directory where another local user could plant
// entries. NODE_COMPILE_CACHE=<dir> chooses another directory and
// NODE_DISABLE_COMPILE_CACHE=1 turns it off (both read by Node itself). A cache that cannot
// be written is skipped silently; the entries are checked against the source on load.
const { enableCompileCache } = await import('node:module')
const { homedir } = await import('node:os')
const { join } = await import('node:path')
const cacheHome = process.env.XDG_CACHE_HOME || join(homedir(), '.cache')
enableCompileCache?.(
  process.env.NODE_COMPILE_CACHE || join(cacheHome, 'tokengate', 'compile-cache'),
)

// Imported after enabling the cache, so that the CLI's own modules are cached too.
await import(fromSources ? '../src/entry.ts' : '../dist/entry.js')

async function exists(url) {
  const { access } = await import('node:fs/promises')
  return access(url).then(
    () => true,
    () => false,
  )
}
