#!/usr/bin/env node
// The `tokengate` bin. The sources are TypeScript run directly by Node >= 24.12 (type stripping).
import { enableCompileCache } from 'node:module'
import { homedir } from 'node:os'
import { join } from 'node:path'

// Why: start-up is dominated by loading ~1,000 modules (our TypeScript, Fastify, TypeBox,
// pino); Node's compile cache keeps V8 code (and the stripped TypeScript) between runs, so
// only the first start after an upgrade compiles everything. The cache lives in the user's
// own cache directory, not in a world-writable temp directory where another local user
// could plant entries. NODE_COMPILE_CACHE=<dir> chooses another directory and
// NODE_DISABLE_COMPILE_CACHE=1 turns it off (both read by Node itself). A cache that cannot
// be written is skipped silently; the entries are checked against the source on load.
const cacheHome = process.env.XDG_CACHE_HOME || join(homedir(), '.cache')
enableCompileCache(process.env.NODE_COMPILE_CACHE || join(cacheHome, 'tokengate', 'compile-cache'))

// Imported after enabling the cache, so that the CLI's own modules are cached too.
await import('../src/cli/main.ts')
