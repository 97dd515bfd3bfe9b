import type { Config } from '../config/schema.ts'
import type { DevSeed } from '../dev/seed.ts'
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
  /**
   * The server `serve` starts, loaded on demand: the composition root (src/main.ts), handed
   * in by the process entry (src/entry.ts), so the CLI itself never imports it.
   */
  readonly server?: (() => Promise<ServerEntry>) | undefined
}

/** What `serve` needs of the composition root. */
export interface ServerEntry {
  startTokengate(config: Readonly<Config>, options: ServeOptions): Promise<Served>
  prepareTokengate(config: Readonly<Config>, options: ServeOptions): Promise<DevSeed | undefined>
}

/** How `serve` starts the server: where its log lines go. */
export interface ServeOptions {
  readonly logDestination?: { write(line: string): unknown }
}

/** A started server, as `serve` reports it. */
export interface Served {
  readonly url: string
  readonly devSeed: DevSeed | undefined
  readonly metricsUrl: string | undefined
  readonly adminUrl: string | undefined
  readonly decisionUrl: string | undefined
  readonly decisionGrpcUrl: string | undefined
  close(): Promise<void>
}
