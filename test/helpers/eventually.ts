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
