import type { FastifyBaseLogger } from 'fastify'
import type { Bindings, ChildLoggerOptions, Logger } from 'pino'

type Level = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace'

/**
 * A request's logger that becomes a pino child only when something is actually logged.
 *
 * Why: Fastify gives every request `logger.child({ reqId })`, and a pino child serialises
 * its bindings through the redaction-aware stringifier at creation, per request. Most
 * requests log nothing at the configured level (the per-request line is written by the
 * outcome recorder, and only at `info`), so the child is
 * built on the first enabled call and reused after it. A call below the level returns at
 * once. Output, bindings and redaction are exactly the child's, since the child does the
 * writing.
 */
class LazyChildLogger {
  readonly #parent: Logger
  readonly #bindings: Bindings
  readonly #options: ChildLoggerOptions
  #child: Logger | undefined

  constructor(parent: Logger, bindings: Bindings, options: ChildLoggerOptions) {
    this.#parent = parent
    this.#bindings = bindings
    this.#options = options
  }

  get level(): string {
    return this.#child?.level ?? this.#options.level ?? this.#parent.level
  }

  set level(level: string) {
    this.#materialise().level = level
  }

  isLevelEnabled(level: string): boolean {
    if (this.#child === undefined && this.#options.level === undefined) {
      return this.#parent.isLevelEnabled(level)
    }
    return this.#materialise().isLevelEnabled(level)
  }

  fatal(...args: unknown[]): void {
    this.#log('fatal', args)
  }
  error(...args: unknown[]): void {
    this.#log('error', args)
  }
  warn(...args: unknown[]): void {
    this.#log('warn', args)
  }
  info(...args: unknown[]): void {
    this.#log('info', args)
  }
  debug(...args: unknown[]): void {
    this.#log('debug', args)
  }
  trace(...args: unknown[]): void {
    this.#log('trace', args)
  }
  silent(): void {}

  child(bindings: Bindings, options?: ChildLoggerOptions): Logger {
    return this.#materialise().child(bindings, options)
  }

  bindings(): Bindings {
    return this.#materialise().bindings()
  }

  #log(level: Level, args: unknown[]): void {
    if (!this.isLevelEnabled(level)) return
    const write = this.#materialise()[level] as (...a: unknown[]) => void
    write.apply(this.#child, args)
  }

  #materialise(): Logger {
    this.#child ??= this.#parent.child(this.#bindings, this.#options)
    return this.#child
  }
}

/** Fastify's `childLoggerFactory`: a `LazyChildLogger` per request. */
export function lazyChildLogger(
  logger: FastifyBaseLogger,
  bindings: Bindings,
  options: ChildLoggerOptions,
): FastifyBaseLogger {
  return new LazyChildLogger(
    logger as unknown as Logger,
    bindings,
    options,
  ) as unknown as FastifyBaseLogger
}
