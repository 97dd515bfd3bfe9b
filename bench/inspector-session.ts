/**
 * A minimal Chrome DevTools Protocol client for a bench server started with `--inspect`:
 * its first target's WebSocket, `call(method, params)` resolving with the result.
 */
export interface InspectorSession {
  call(method: string, params: object): Promise<unknown>
  close(): void
}

/** Connects to the first inspector target listening on `127.0.0.1:<port>`. */
export async function inspectPort(port: number): Promise<InspectorSession> {
  const targets = (await (await fetch(`http://127.0.0.1:${port}/json`)).json()) as {
    webSocketDebuggerUrl: string
  }[]
  return inspectorSession(targets[0]?.webSocketDebuggerUrl ?? '')
}

export async function inspectorSession(url: string): Promise<InspectorSession> {
  const socket = new WebSocket(url)
  await new Promise((resolve, reject) => {
    socket.onopen = resolve
    socket.onerror = reject
  })
  let nextId = 1
  const waiting = new Map<number, (result: unknown) => void>()
  socket.onmessage = (event) => {
    const message = JSON.parse(String(event.data)) as { id?: number; result?: unknown }
    if (message.id !== undefined) waiting.get(message.id)?.(message.result)
  }
  return {
    call(method: string, params: object): Promise<unknown> {
      const id = nextId++
      socket.send(JSON.stringify({ id, method, params }))
      return new Promise((resolve) => waiting.set(id, resolve))
    },
    close: () => socket.close(),
  }
}
