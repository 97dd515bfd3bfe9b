import pino, { type DestinationStream, type Logger } from 'pino'

/**
 * The process logger. Tokens never reach it: request lines carry a fingerprint, and these
 * redaction paths are a second line of defence should a header object ever be logged.
 *
 * Warnings are expected conditions (a dependency down, a retry, a reconnect): their `err` is
 * logged as `error` with type, message and code, which say what happened; a stack trace would
 * only bury it. Errors (level 50+) keep `err` with its stack: those are bugs to report.
 */
export function createLogger(level: string, destination?: DestinationStream): Logger {
  return pino(
    {
      level,
      redact: {
        paths: [
          'req.headers.authorization',
          'headers.authorization',
          'request.headers.authorization',
          '*.headers.authorization',
          'token',
          '*.token',
        ],
        censor: '[redacted]',
      },
      hooks: {
        logMethod(args, method, logLevel) {
          if (logLevel === WARN) args[0] = withoutStack(args[0])
          return method.apply(this, args)
        },
      },
    },
    destination,
  )
}

const WARN = 40

/** A warning's fields with its `err` replaced by `error`: type, message and code. */
function withoutStack(fields: unknown): unknown {
  if (fields instanceof Error) return { error: brief(fields) }
  if (fields !== null && typeof fields === 'object' && 'err' in fields) {
    const { err, ...rest } = fields as { err: unknown }
    if (err instanceof Error) return { ...rest, error: brief(err) }
  }
  return fields
}

function brief(error: Error): Record<string, unknown> {
  const { code } = error as { code?: unknown }
  // AggregateError (e.g. ECONNREFUSED on both 127.0.0.1 and ::1) carries its reasons inside.
  const message =
    error.message ||
    (error instanceof AggregateError
      ? error.errors.map((e) => String(e?.message ?? e)).join('; ')
      : '')
  return { type: error.constructor.name, message, ...(code === undefined ? {} : { code }) }
}
