/** A stream the CLI writes text to (process.stdout, or a capture in tests). */
export interface TextSink {
  write(chunk: string): unknown
}

/**
 * Everything the CLI touches outside its arguments, so tests run it in-process with captured
 * output and a chosen environment.
 */
export interface CliIo {
  readonly stdout: TextSink
  readonly stderr: TextSink
  /** The environment config is read from (`TOKENGATE_*`, `DATABASE_URL`). */
  readonly env: Readonly<Record<string, string | undefined>>
  /** Stops `serve` when aborted, as SIGINT/SIGTERM do (for tests and embedding). */
  readonly signal?: AbortSignal | undefined
  /** Where `serve` writes its log lines (default: stdout, or stderr with `--json`). */
  readonly log?: TextSink | undefined
  /** Standard input, read by commands that accept `-` (e.g. `pat revoke-leaked -`). */
  readonly stdin?: AsyncIterable<string | Uint8Array> | undefined
  /** Epoch milliseconds; defaults to `Date.now`. */
  readonly now?: (() => number) | undefined
}
