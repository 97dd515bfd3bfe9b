/**
 * One minute's usage counts, as the usage write-behind keeps them until they are stored: the
 * total, and per tenant and per key the four outcome counts, in typed arrays at the slot a
 * `KeyedSlots` gives the subject's id.
 *
 * Why not a `Map` of count objects: with 100,000 keys in use, every minute rebuilt 100,000
 * objects that lived for the flush interval, so V8 promoted them to the old generation and
 * left them there as garbage (tens of MB of served memory). Here a subject costs its id's bytes
 * and four integers off the V8 heap, and only a key's tenant is a (shared) heap string.
 */
import { KeyedSlots } from '../lib/keyed-slots.ts'
import type { UsageResolution, UsageScope } from './store.ts'
import { type UsageBatch, type UsageBatchEncoder, usageBatchEncoder } from './usage-batch.ts'

export const USAGE_OUTCOMES = ['allowed', 'unauthorized', 'forbidden', 'limited'] as const
export type UsageOutcome = (typeof USAGE_OUTCOMES)[number]

const OUTCOME_INDEX: Readonly<Record<UsageOutcome, number>> = {
  allowed: 0,
  unauthorized: 1,
  forbidden: 2,
  limited: 3,
}

const BUCKETS: readonly [UsageResolution, number][] = [
  ['minute', 60_000],
  ['hour', 3_600_000],
  ['day', 86_400_000],
]

/** Inline bytes of an id (a PAT id is 24 characters; longer ids still work, held aside). */
const ID_BYTES = 24

/** The ids of one scope and their four counts per slot (slots 0..size-1: nothing is deleted). */
class SubjectCounts {
  readonly ids: KeyedSlots
  counts = new Int32Array(0)
  /** A key's tenant, per slot (tenants only: null). */
  readonly tenantOf: (string | null)[] = []

  constructor(maxSubjects: number) {
    this.ids = new KeyedSlots(maxSubjects, ID_BYTES)
  }

  /** Adds an id that is not held, with zero counts; returns its slot. */
  add(id: string, tenantId: string | null): number {
    const slot = this.ids.add(id)
    if (this.counts.length < this.ids.capacity * 4) {
      const grown = new Int32Array(this.ids.capacity * 4)
      grown.set(this.counts)
      this.counts = grown
    }
    this.tenantOf[slot] = tenantId
    return slot
  }
}

export class MinuteCounts {
  /** Epoch ms of the minute. */
  readonly start: number
  readonly #maxSubjects: number
  readonly #total = new Int32Array(4)
  readonly #tenants: SubjectCounts
  readonly #keys: SubjectCounts
  /** Counts of tenants and keys beyond `maxSubjects`, kept in the total only. */
  overflow = 0

  constructor(start: number, maxSubjects: number) {
    this.start = start
    this.#maxSubjects = maxSubjects
    this.#tenants = new SubjectCounts(maxSubjects)
    this.#keys = new SubjectCounts(maxSubjects)
  }

  /** Subjects in write order: the total, then tenants, then keys. */
  get subjects(): number {
    return 1 + this.#tenants.ids.size + this.#keys.ids.size
  }

  /** Adds `by` to an outcome of the total, the tenant (if any) and the key (if any). */
  add(outcome: UsageOutcome, tenantId: string | null, tokenId: string | null, by: number): void {
    const index = OUTCOME_INDEX[outcome]
    this.#addCounts(null, null, null, index, by)
    if (tenantId === null) return
    this.#addCounts(this.#tenants, tenantId, null, index, by)
    if (tokenId !== null) this.#addCounts(this.#keys, tokenId, tenantId, index, by)
  }

  /** Adds every count of `from`'s subjects from the `skip`-th on (in write order). */
  merge(from: MinuteCounts, skip: number): void {
    let subject = 0
    if (subject++ >= skip) {
      for (let i = 0; i < 4; i++) this.#addCounts(null, null, null, i, from.#total[i] as number)
    }
    for (const [into, source] of [
      [this.#tenants, from.#tenants],
      [this.#keys, from.#keys],
    ] as const) {
      for (let slot = 0; slot < source.ids.size; slot++) {
        if (subject++ < skip) continue
        const id = source.ids.keyAt(slot)
        const tenantId = source.tenantOf[slot] ?? null
        for (let i = 0; i < 4; i++) {
          const by = source.counts[slot * 4 + i] as number
          if (by !== 0) this.#addCounts(into, id, tenantId, i, by)
        }
      }
    }
  }

  /**
   * The rows of subjects `from` to `from + count - 1` (write order), encoded as `addUsage`
   * reads them (usage-batch.ts, straight from the typed arrays: no row objects): each
   * subject's minute, hour and day bucket, each bucket once (the same hour or day of two
   * minutes goes in two writes and the store adds them up).
   */
  rows(from: number, count: number): UsageBatch {
    const encoder = usageBatchEncoder()
    encoder.start()
    const end = Math.min(from + count, this.subjects)
    const tenants = this.#tenants.ids.size
    for (let subject = from; subject < end; subject++) {
      if (subject === 0) {
        this.#encode(encoder, 'all', '', null, this.#total, 0)
      } else if (subject <= tenants) {
        const slot = subject - 1
        const ids = this.#tenants.ids
        this.#encode(encoder, 'tenant', ids.keyAt(slot), null, this.#tenants.counts, slot * 4)
      } else {
        const slot = subject - 1 - tenants
        const keys = this.#keys
        const tenantId = keys.tenantOf[slot] ?? null
        this.#encode(encoder, 'key', keys.ids.keyAt(slot), tenantId, keys.counts, slot * 4)
      }
    }
    return encoder.end()
  }

  /** One subject's minute, hour and day rows. */
  #encode(
    encoder: UsageBatchEncoder,
    scope: UsageScope,
    subject: string,
    tenantId: string | null,
    counts: Int32Array,
    at: number,
  ): void {
    for (const [resolution, length] of BUCKETS) {
      const bucketStart = Math.floor(this.start / length) * length
      encoder.row(scope, subject, resolution, bucketStart, tenantId, counts, at)
    }
  }

  #addCounts(
    into: SubjectCounts | null,
    id: string | null,
    tenantId: string | null,
    index: number,
    by: number,
  ): void {
    if (into === null || id === null) {
      this.#total[index] = (this.#total[index] as number) + by
      return
    }
    let slot = into.ids.find(id)
    if (slot === -1) {
      if (this.subjects - 1 >= this.#maxSubjects) {
        this.overflow++
        return
      }
      slot = into.add(id, tenantId)
    }
    const at = slot * 4 + index
    into.counts[at] = (into.counts[at] as number) + by
  }
}
