const REASONS: Readonly<Record<string, string>> = {
  EADDRINUSE: 'address already in use',
  EADDRNOTAVAIL: 'no such address on this machine',
  EACCES: 'permission denied (ports below 1024 need privileges)',
}

/**
 * A listener of the decision API that cannot listen, named with its settings as every
 * listener's failure is (startup.ts `listenAs`): `decision gRPC listener (decision.host,
 * decision.grpcPort) cannot listen on 127.0.0.1:9191: address already in use`.
 */
export function cannotListen(listener: string, host: string, port: number, error: unknown): Error {
  const { code, message } = error as NodeJS.ErrnoException
  return new Error(
    `${listener} cannot listen on ${host}:${port}: ${REASONS[code ?? ''] ?? message}`,
    { cause: error },
  )
}
