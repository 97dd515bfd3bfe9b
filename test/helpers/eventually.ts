/**
 * Polls `check` every 50 ms until it returns a value, or fails after `timeoutMs`: for what
 * lands a moment later (write-behind audit, another process's change seen by polling).
 */
export async function eventually<T>(
  check: () => Promise<T | undefined>,
  timeoutMs = 10_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await check()
    if (value !== undefined) return value
    if (Date.now() > deadline) throw new Error('condition not met in time')
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

/**
 * Milliseconds until `probe` holds, polling every 20 ms: for bounds such as "a change reaches
 * the server within a second". Fails after `timeoutMs`.
 */
export async function millisUntil(
  probe: () => Promise<boolean>,
  timeoutMs = 3000,
): Promise<number> {
  const started = performance.now()
  while (!(await probe())) {
    if (performance.now() - started > timeoutMs) throw new Error(`not within ${timeoutMs} ms`)
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  return performance.now() - started
}
