/**
 * The journal under the usage write-behind: each count is appended (one write(2)) before the
 * request it counts is answered, so a SIGKILLed process loses no counted request; any later
 * process on the data directory adds what a gone owner's journal holds (spool-files.ts:
 * owners by lock, never by PID).
 *
 * Exactly once: a segment's counts are written as one minute's slice of subjects per
 * `addUsage`, each marked `<segment>:<minute>:<first subject>`, and the store records the mark
 * in the same transaction as the counts and skips a mark it already holds. The live writer
 * and a replay of the same segment cut the same slices (the counts are built from the same
 * lines in the same order, with the parameters the segment's header names), so a slice
 * stored before the kill is skipped by the replay and one that was not is added.
 */

import { openSpoolFiles, recoverSpoolFiles } from './spool-files.ts'
import type { UsageStore } from './store.ts'
import { MinuteCounts, USAGE_OUTCOMES, type UsageOutcome } from './usage-counts.ts'

const MINUTE_MS = 60_000

/** How the counts of a segment are cut into writes: the replay must cut them the same way. */
export interface UsageSlicing {
  /** Keys and tenants counted apart per minute (`MinuteCounts`). */
  readonly maxSubjects: number
  /** Subjects per `addUsage` call. */
  readonly subjectsPerWrite: number
}

export interface UsageJournal {
  /** Appends one count: `by` (+1 or -1) of `outcome` in the minute starting at `minuteStart`. */
  append(
    minuteStart: number,
    outcome: UsageOutcome,
    by: number,
    tenantId: string | null,
    tokenId: string | null,
  ): void
  /** Bytes in the current segment. */
  readonly bytes: number
  /** Seals the current segment (if it holds anything); its id, for `writeMinutes` and `remove`. */
  seal(): string | undefined
  /** The sealed segment's counts are stored: deletes it. */
  remove(segment: string): void
  /** Ends this owner; a segment still holding counts is left for the next process. */
  close(): void
}

const OUTCOME_CODE: Readonly<Record<UsageOutcome, number>> = {
  allowed: 0,
  unauthorized: 1,
  forbidden: 2,
  limited: 3,
}

/** Opens this process's usage journal in `dir` (created 0700). */
export function openUsageJournal(dir: string, slicing: UsageSlicing): UsageJournal {
  const files = openSpoolFiles(dir)
  const header = `#usage ${slicing.maxSubjects} ${slicing.subjectsPerWrite}\n`
  let fresh = true
  let bytes = 0
  return {
    get bytes() {
      return bytes
    },
    append(minuteStart, outcome, by, tenantId, tokenId) {
      // `<minute> <outcome>[-] <tenant> <key>`: ids are [A-Za-z0-9._-] (tenants) or tok_…
      const line = `${minuteStart / MINUTE_MS} ${OUTCOME_CODE[outcome]}${by < 0 ? '-' : ''} ${tenantId ?? ''} ${tokenId ?? ''}\n`
      const text = fresh ? header + line : line
      files.append(text)
      fresh = false
      bytes += text.length
    },
    seal() {
      const name = files.seal()
      if (name === undefined) return undefined
      fresh = true
      bytes = 0
      return segmentId(name)
    },
    remove(segment) {
      files.remove([`${segment}.jsonl`])
    },
    close() {
      files.close()
    },
  }
}

/**
 * Writes `minutes` (one sealed segment's counts, or those of no journal when `segment` is
 * undefined) a slice at a time, from `progress` on, advancing it as slices are stored: a
 * retry after a failure resumes where the store stopped.
 */
export async function writeMinutes(
  store: Pick<UsageStore, 'addUsage'>,
  segment: string | undefined,
  minutes: readonly MinuteCounts[],
  subjectsPerWrite: number,
  progress: { minute: number; subject: number } = { minute: 0, subject: 0 },
): Promise<void> {
  for (; progress.minute < minutes.length; progress.minute++, progress.subject = 0) {
    const minute = minutes[progress.minute] as MinuteCounts
    while (progress.subject < minute.subjects) {
      const count = Math.min(subjectsPerWrite, minute.subjects - progress.subject)
      const mark =
        segment === undefined ? undefined : `${segment}:${minute.start}:${progress.subject}`
      await writeSlice(store, minute, progress.subject, count, mark)
      progress.subject += count
    }
  }
}

/**
 * One slice's write. Why a function of its own: its rows live in this frame only, gone when
 * it returns; held in `writeMinutes`'s suspended frame, every slice's rows outlived the young
 * generation while the store wrote them.
 */
function writeSlice(
  store: Pick<UsageStore, 'addUsage'>,
  minute: MinuteCounts,
  from: number,
  count: number,
  mark: string | undefined,
): Promise<void> {
  return store.addUsage(minute.rows(from, count), mark === undefined ? {} : { mark })
}

export interface UsageRecovery {
  /** Journal segments of gone owners replayed. */
  readonly segments: number
  /** Lines that could not be read (skipped). */
  readonly unreadable: number
}

/** Adds what gone owners' journals in `dir` hold (each slice once), then deletes them. */
export async function recoverUsageJournal(
  dir: string,
  store: Pick<UsageStore, 'addUsage'>,
  defaults: UsageSlicing,
): Promise<UsageRecovery> {
  let unreadable = 0
  const segments = await recoverSpoolFiles(dir, async (name, text) => {
    let slicing = defaults
    const minutes = new Map<number, MinuteCounts>()
    const lines = text.split('\n')
    // What follows the last newline was torn by a short write or a kill mid-write.
    if (lines.pop() !== '') unreadable++
    for (const line of lines) {
      if (line === '') continue
      if (line.startsWith('#usage ')) {
        const [, maxSubjects, subjectsPerWrite] = line.split(' ').map(Number)
        slicing = {
          maxSubjects: maxSubjects as number,
          subjectsPerWrite: subjectsPerWrite as number,
        }
        continue
      }
      const [minute, code, tenantId, tokenId, extra] = line.split(' ')
      const outcome = USAGE_OUTCOMES[Number.parseInt(code ?? '', 10)]
      const start = Number(minute) * MINUTE_MS
      if (
        outcome === undefined ||
        !/^\d+-?$/.test(code ?? '') ||
        !Number.isSafeInteger(start) ||
        tokenId === undefined ||
        extra !== undefined
      ) {
        unreadable++
        continue
      }
      let counts = minutes.get(start)
      if (counts === undefined) {
        counts = new MinuteCounts(start, slicing.maxSubjects)
        minutes.set(start, counts)
      }
      counts.add(outcome, tenantId || null, tokenId || null, code?.endsWith('-') ? -1 : 1)
    }
    await writeMinutes(store, segmentId(name), [...minutes.values()], slicing.subjectsPerWrite)
  })
  return { segments, unreadable }
}

/** `<owner>.<seq>` of `<owner>.<seq>.jsonl`: unique across processes and restarts. */
function segmentId(name: string): string {
  return name.replace(/\.jsonl$/, '')
}
