import { createHash } from 'node:crypto'
import type { CounterCallback, CounterResult, Counters } from './counters.ts'
import type { RedisClient } from './redis-client.ts'

// One round trip per hit: INCR, and PEXPIRE when the window starts (a fixed window).
const INCR_SCRIPT = `
local current = redis.call('INCR', KEYS[1])
local ttl = tonumber(ARGV[1])
if current == 1 then redis.call('PEXPIRE', KEYS[1], ttl) else ttl = redis.call('PTTL', KEYS[1]) end
return {current, ttl}`
const READ_SCRIPT = `
local current = redis.call('GET', KEYS[1])
if not current then return {0, 0} end
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then ttl = 0 end
return {tonumber(current), ttl}`

const sha1 = (text: string) => createHash('sha1').update(text).digest('hex')
const INCR_SHA = sha1(INCR_SCRIPT)
const READ_SHA = sha1(READ_SCRIPT)

type ScriptReply = (error: Error | null | undefined, result?: unknown) => void

/**
 * Counters shared by every instance through Redis, keys `<prefix><key>`: each count is one
 * `EVALSHA` of a counter script, sent as a plain command, and `EVAL` (which loads the script)
 * only after Redis answered `NOSCRIPT` (a new server, a failover, `SCRIPT FLUSH`).
 * Why not ioredis `defineCommand`: per call it wraps the command's promise in two more
 * (its own NOSCRIPT retry and the callback adapter) plus closures, all kept alive until Redis
 * answers, ~1 KB a count that a request's two counts carried into the old space under load.
 */
export class RedisCounters implements Counters {
  readonly #redis: RedisClient
  readonly #prefix: string

  constructor(redis: RedisClient, prefix: string) {
    this.#redis = redis
    this.#prefix = prefix
  }

  incr(key: string, callback: CounterCallback, timeWindow: number): void {
    this.#run(INCR_SHA, INCR_SCRIPT, this.#prefix + key, timeWindow, callback)
  }

  read(key: string, callback: CounterCallback): void {
    this.#run(READ_SHA, READ_SCRIPT, this.#prefix + key, undefined, callback)
  }

  #run(
    sha: string,
    script: string,
    key: string,
    windowMs: number | undefined,
    callback: CounterCallback,
  ): void {
    const redis = this.#redis
    const answered: ScriptReply = (error, result) => {
      if (error?.message.startsWith('NOSCRIPT')) {
        const loaded: ScriptReply = (again, result) => reply(callback, again, result)
        if (windowMs === undefined) redis.eval(script, 1, key, loaded)
        else redis.eval(script, 1, key, windowMs, loaded)
        return
      }
      reply(callback, error, result)
    }
    if (windowMs === undefined) redis.evalsha(sha, 1, key, answered)
    else redis.evalsha(sha, 1, key, windowMs, answered)
  }
}

function reply(callback: CounterCallback, error: Error | null | undefined, result: unknown): void {
  if (error) {
    callback(error)
    return
  }
  const pair = result as readonly [unknown, unknown] | undefined
  const current = pair?.[0]
  const ttl = pair?.[1]
  if (typeof current !== 'number' || typeof ttl !== 'number') {
    callback(new Error('rate-limit counters: unexpected reply'))
    return
  }
  const counted: CounterResult = { current, ttl }
  callback(null, counted)
}
