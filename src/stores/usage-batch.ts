/**
 * Usage rows as `addUsage`'s one statement reads them (sql/usage.ts): the JSON array of each
 * row's values in `USAGE_COLUMNS` order (`batchParam`, sql/db.ts), written byte by byte into a
 * reused buffer, and how many rows.
 *
 * Why: the usage flush built three row objects, three value arrays and their JSON per counted
 * subject; with 100,000 keys a minute those were the bulk of what the main thread promoted and
 * then dropped under load (bench/README.md, "Memory under load"). `MinuteCounts.rows` writes a
 * slice here straight from its typed arrays; `encodeUsage` writes given rows the same way, so
 * there is one encoding.
 */
import type { UsageBatch, UsageResolution, UsageRow, UsageRows, UsageScope } from './store.ts'

export type { UsageBatch, UsageRows } from './store.ts'

/** `"scope","` ... and `","resolution",` as bytes, written once per row. */
const SCOPES: Readonly<Record<UsageScope, Uint8Array>> = {
  all: Buffer.from('["all",'),
  tenant: Buffer.from('["tenant",'),
  key: Buffer.from('["key",'),
}
const RESOLUTIONS: Readonly<Record<UsageResolution, Uint8Array>> = {
  minute: Buffer.from(',"minute",'),
  hour: Buffer.from(',"hour",'),
  day: Buffer.from(',"day",'),
}
const NULL = Buffer.from('null')
const QUOTE = 0x22
const COMMA = 0x2c
const MINUS = 0x2d
const ZERO = 0x30

/**
 * Writes one batch at a time: `start`, `row` per row, `end`. The buffer is kept between
 * batches (off the V8 heap); only the finished text is a heap string.
 */
export class UsageBatchEncoder {
  #buffer = Buffer.allocUnsafe(64 * 1024)
  #at = 0
  #rows = 0

  start(): void {
    this.#at = 0
    this.#rows = 0
    this.#byte(0x5b) // [
  }

  row(
    scope: UsageScope,
    subject: string,
    resolution: UsageResolution,
    bucketStart: number,
    tenantId: string | null,
    counts: ArrayLike<number>,
    at: number,
  ): void {
    // The longest row but its ids: scope, resolution, 5 numbers of up to 21 characters.
    this.#reserve(160)
    if (this.#rows++ > 0) this.#byte(COMMA)
    this.#bytes(SCOPES[scope])
    this.#string(subject)
    this.#bytes(RESOLUTIONS[resolution])
    this.#number(bucketStart)
    this.#byte(COMMA)
    if (tenantId === null) this.#bytes(NULL)
    else this.#string(tenantId)
    for (let i = 0; i < 4; i++) {
      this.#byte(COMMA)
      this.#number(counts[at + i] as number)
    }
    this.#byte(0x5d) // ]
  }

  end(): UsageBatch {
    this.#byte(0x5d) // ]
    return { rows: this.#rows, text: this.#buffer.toString('utf8', 0, this.#at) }
  }

  #reserve(bytes: number): void {
    if (this.#at + bytes <= this.#buffer.length) return
    const grown = Buffer.allocUnsafe(Math.max(this.#buffer.length * 2, this.#at + bytes))
    this.#buffer.copy(grown, 0, 0, this.#at)
    this.#buffer = grown
  }

  #byte(value: number): void {
    this.#reserve(1)
    this.#buffer[this.#at++] = value
  }

  #bytes(value: Uint8Array): void {
    this.#reserve(value.length)
    this.#buffer.set(value, this.#at)
    this.#at += value.length
  }

  /** A JSON string: as is when every character is printable ASCII but `"` and `\`. */
  #string(value: string): void {
    for (let i = 0; i < value.length; i++) {
      const code = value.charCodeAt(i)
      if (code < 0x20 || code > 0x7e || code === QUOTE || code === 0x5c) {
        const json = JSON.stringify(value)
        this.#reserve(json.length * 3)
        this.#at += this.#buffer.write(json, this.#at, 'utf8')
        return
      }
    }
    this.#reserve(value.length + 2)
    this.#buffer[this.#at++] = QUOTE
    this.#at += this.#buffer.write(value, this.#at, 'latin1')
    this.#buffer[this.#at++] = QUOTE
  }

  /** An integer as JSON writes it (counts and epoch ms: safe integers). */
  #number(value: number): void {
    if (!Number.isSafeInteger(value)) {
      this.#at += this.#buffer.write(JSON.stringify(value), this.#at, 'latin1')
      return
    }
    if (value < 0) {
      this.#buffer[this.#at++] = MINUS
      value = -value
    }
    let digits = 1
    for (let rest = value; rest >= 10; rest = Math.floor(rest / 10)) digits++
    for (let i = this.#at + digits - 1; i >= this.#at; i--) {
      this.#buffer[i] = ZERO + (value % 10)
      value = Math.floor(value / 10)
    }
    this.#at += digits
  }
}

const shared = new UsageBatchEncoder()

/** The encoder a batch is written with (synchronously: `start` to `end` in one turn). */
export const usageBatchEncoder = (): UsageBatchEncoder => shared

/** Given rows, encoded. */
export function encodeUsage(rows: readonly UsageRow[]): UsageBatch {
  const encoder = usageBatchEncoder()
  encoder.start()
  const counts = [0, 0, 0, 0]
  for (const row of rows) {
    counts[0] = row.allowed
    counts[1] = row.unauthorized
    counts[2] = row.forbidden
    counts[3] = row.limited
    encoder.row(row.scope, row.subject, row.resolution, row.bucketStart, row.tenantId, counts, 0)
  }
  return encoder.end()
}

/** The rows of a batch, as objects (for callers that read them: a test's store). */
export function usageRows(usage: UsageRows): readonly UsageRow[] {
  if (Array.isArray(usage)) return usage
  const values = JSON.parse((usage as UsageBatch).text) as unknown[][]
  return values.map(([scope, subject, resolution, bucketStart, tenantId, a, u, f, l]) => ({
    scope: scope as UsageScope,
    subject: subject as string,
    resolution: resolution as UsageResolution,
    bucketStart: bucketStart as number,
    tenantId: tenantId as string | null,
    allowed: a as number,
    unauthorized: u as number,
    forbidden: f as number,
    limited: l as number,
  }))
}

/** Whether rows were given already encoded. */
export const isUsageBatch = (usage: UsageRows): usage is UsageBatch => !Array.isArray(usage)
