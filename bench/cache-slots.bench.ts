/**
 * Issue #31: does the PAT lookup cache need its packed layout? The same 100,000 cached PATs
 * held by the production `PackedSlots` + `PatColumns` and by a plain `Map`-backed
 * `CacheSlots` (keys -> `{ value, expiresAt, touchedAt }`, the record as the store returned
 * it, LRU by delete + re-insert, the oldest evicted), each in a fresh process with the
 * production Node flags:
 * - memory after a full GC, against the same process before the cache was filled: V8 heap
 *   used, ArrayBuffer data (the packed layout's typed arrays live there), RSS;
 * - a hit's cost: `get` of every key once in a shuffled order, a fresh key string each time
 *   (as a request hashes its token), median ns over rounds.
 * Records are built as a store row mapper builds them: every string and permission list
 * fresh per record (a JSON round trip), so nothing is shared that a store would not share.
 *
 * Run: `node --expose-gc bench/cache-slots.bench.ts [--entries 100000] [--runs 3]`
 */
import { execFileSync } from 'node:child_process'
import { createHash, randomBytes } from 'node:crypto'
import type { PatRecord } from '../src/core/ports.ts'
import type { CacheSlots } from '../src/stores/lookup-cache-rules.ts'
import { Interner, PackedSlots, PatColumns } from '../src/stores/packed-lookup-slots.ts'
import { readCli } from './cli.ts'
import { median } from './latency-stats.ts'
import { PRODUCTION_NODE_FLAGS } from './load.ts'

const { values } = readCli({
  script: 'bench/cache-slots.bench.ts',
  options: {
    entries: { type: 'number', integer: true, default: 100_000 },
    runs: { type: 'number', integer: true, default: 3 },
    // The one variant a child process of this script measures.
    variant: { type: 'string' },
  },
  internal: ['variant'],
})
const ENTRIES = values.entries
const gc = (globalThis as { gc?: () => void }).gc

/** The simplest bounded LRU a `Map` gives: what the packed layout is measured against. */
class MapSlots<V> implements CacheSlots<V> {
  readonly #entries = new Map<string, { value: V; expiresAt: number; touchedAt: number }>()
  readonly #maxEntries: number

  constructor(maxEntries: number) {
    this.#maxEntries = maxEntries
  }

  get size(): number {
    return this.#entries.size
  }

  get(key: string, now: number): V | undefined {
    const entry = this.#entries.get(key)
    if (entry === undefined) return undefined
    if (entry.expiresAt <= now) {
      this.#entries.delete(key)
      return undefined
    }
    // The same once-a-second recency move as PackedSlots.
    if (now - entry.touchedAt >= 1000) {
      this.#entries.delete(key)
      entry.touchedAt = now
      this.#entries.set(key, entry)
    }
    return entry.value
  }

  set(key: string, value: V, expiresAt: number, now: number): void {
    this.#entries.delete(key)
    if (this.#entries.size >= this.#maxEntries) {
      const oldest = this.#entries.keys().next()
      if (!oldest.done) this.#entries.delete(oldest.value)
    }
    this.#entries.set(key, { value, expiresAt, touchedAt: now })
  }

  delete(key: string): void {
    this.#entries.delete(key)
  }

  clear(): void {
    this.#entries.clear()
  }
}

/** A record as a store returns it: fresh strings and a fresh permission list. */
function storeRow(i: number, now: number): { hash: string; record: PatRecord } {
  const token = `pat_${randomBytes(24).toString('base64url')}`
  const hash = createHash('sha256').update(token).digest('hex')
  const record: PatRecord = {
    id: `tok_${randomBytes(12).toString('base64url')}`,
    tokenHash: hash,
    tenantId: 'mem-tenant',
    subject: `user-${i}`,
    name: 'bench',
    permissions: ['tokens:read'],
    last4: token.slice(-4),
    createdAt: now,
    expiresAt: now + 86_400_000,
    revokedAt: null,
    lastUsedAt: null,
    rotatedFrom: null,
    supersededAt: null,
    graceUntil: null,
    disabledAt: null,
  }
  return { hash, record: JSON.parse(JSON.stringify(record)) as PatRecord }
}

interface Measured {
  readonly variant: string
  readonly heapMb: number
  readonly arrayBuffersMb: number
  readonly rssMb: number
  readonly hitNs: number
}

function measureVariant(variant: string): Measured {
  const slots: CacheSlots<PatRecord> =
    variant === 'packed'
      ? new PackedSlots(ENTRIES, new PatColumns(new Interner()))
      : new MapSlots<PatRecord>(ENTRIES)
  const now = Date.now()
  // What a request computes per lookup: the hashes are kept as bytes here, so that the
  // measured heap holds only what the slots keep.
  const hashes = Buffer.alloc(ENTRIES * 32)
  gc?.()
  gc?.()
  const before = process.memoryUsage()
  for (let i = 0; i < ENTRIES; i++) {
    const { hash, record } = storeRow(i, now)
    Buffer.from(hash, 'hex').copy(hashes, i * 32)
    slots.set(hash, record, now + 3_600_000, now)
  }
  gc?.()
  gc?.()
  const after = process.memoryUsage()
  if (slots.size !== ENTRIES) throw new Error(`${variant}: ${slots.size} entries held`)
  const order = Array.from({ length: ENTRIES }, (_, i) => i)
  for (let i = order.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1))
    ;[order[i], order[j]] = [order[j] as number, order[i] as number]
  }
  const rounds: number[] = []
  for (let round = 0; round < 7; round++) {
    const at = now + 1 + round * 1001
    const started = process.hrtime.bigint()
    for (const i of order) {
      const key = hashes.toString('hex', i * 32, i * 32 + 32)
      if (slots.get(key, at) === undefined) throw new Error(`${variant}: a miss`)
    }
    rounds.push(Number(process.hrtime.bigint() - started) / ENTRIES)
  }
  const mb = (bytes: number) => bytes / 1024 / 1024
  return {
    variant,
    heapMb: mb(after.heapUsed - before.heapUsed),
    arrayBuffersMb: mb(after.arrayBuffers - before.arrayBuffers),
    rssMb: mb(after.rss - before.rss),
    hitNs: median(rounds),
  }
}

if (values.variant) {
  process.stdout.write(JSON.stringify(measureVariant(values.variant)))
} else {
  console.log(
    `${ENTRIES} cached PATs, each variant in a fresh process (node --expose-gc ${PRODUCTION_NODE_FLAGS.join(' ')}); deltas after a full GC`,
  )
  console.log('variant  heap used  ArrayBuffers  heap+AB   bytes/key   RSS     hit (incl. hex key)')
  for (let run = 1; run <= values.runs; run++) {
    for (const variant of ['packed', 'map']) {
      const m = JSON.parse(
        execFileSync(
          process.execPath,
          [
            '--expose-gc',
            ...PRODUCTION_NODE_FLAGS,
            import.meta.filename,
            '--variant',
            variant,
            '--entries',
            String(ENTRIES),
          ],
          { encoding: 'utf8' },
        ),
      ) as Measured
      const total = m.heapMb + m.arrayBuffersMb
      console.log(
        [
          m.variant.padEnd(7),
          `${m.heapMb.toFixed(1)} MB`.padStart(10),
          `${m.arrayBuffersMb.toFixed(1)} MB`.padStart(13),
          `${total.toFixed(1)} MB`.padStart(9),
          `${((total * 1024 * 1024) / ENTRIES).toFixed(0)}`.padStart(11),
          `${m.rssMb.toFixed(1)} MB`.padStart(9),
          `${m.hitNs.toFixed(0)} ns`.padStart(10),
        ].join(' '),
      )
    }
  }
}
