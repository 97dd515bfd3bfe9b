import pino, { type DestinationStream, type Logger } from 'pino'

/**
 * The process logger. Tokens never reach it: request lines carry a fingerprint, and these
 * redaction paths are a second line of defence should a header object ever be logged.
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
    },
    destination,
  )
}
