#!/usr/bin/env -S node --max-semi-space-size=8
// The `tokengate` bin. The sources are TypeScript run directly by Node >= 24.12 (type stripping).
//
// Why --max-semi-space-size=8: filling the lookup cache is almost all survivors, so V8 grows
// the young generation to its 128 MB maximum and keeps it there under load; 8 MB semi-spaces
// hold it at 16 MB (RSS with 100,000 cached PATs: ~238 -> ~157 MB, bench/memory.bench.ts) for
// more frequent, short young collections (no throughput change beyond the benchmark's noise).
// `env -S` splits the flag off (GNU coreutils 8.30+); where `env` has no -S, set
// NODE_OPTIONS=--max-semi-space-size=8 instead (docs/scale-out.md).
import { enableCompileCache } from 'node:module'
import { homedir } from 'node:os'
import { join } from 'node:path'

// Why: start-up is dominated by loading ~360 modules (our TypeScript, Fastify, pino, the
// store); Node's compile cache keeps V8 code (and the stripped TypeScript) between runs, so
// only the first start after an upgrade compiles everything. The cache lives in the user's
// own cache directory, not in a world-writable temp directory where another local user
// could plant entries. NODE_COMPILE_CACHE=<dir> chooses another directory and
// NODE_DISABLE_COMPILE_CACHE=1 turns it off (both read by Node itself). A cache that cannot
// be written is skipped silently; the entries are checked against the source on load.
const cacheHome = process.env.XDG_CACHE_HOME || join(homedir(), '.cache')
enableCompileCache(process.env.NODE_COMPILE_CACHE || join(cacheHome, 'tokengate', 'compile-cache'))

// Imported after enabling the cache, so that the CLI's own modules are cached too.
await import('../src/cli/main.ts')
