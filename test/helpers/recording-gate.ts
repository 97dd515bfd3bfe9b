import { createGate, type Gate } from '../../src/auth/gate.ts'
import type { OutcomeRecorder } from '../../src/auth/outcome-recorder.ts'
import type { AuthenticateMaybeSync } from '../../src/core/authenticate.ts'

/**
 * A gate over `authenticate` whose recorder keeps each outcome's code (`ok`, or the failure's):
 * what a binding's requests leave in the one recorder (audit, metrics).
 */
export function recordingGate(authenticate: AuthenticateMaybeSync): {
  readonly gate: Gate
  readonly recorded: string[]
} {
  const recorded: string[] = []
  const recorder: OutcomeRecorder = {
    timesAuthentication: false,
    recordsAnswers: false,
    recordOutcome: (_request, outcome) =>
      void recorded.push(outcome.allowed ? 'ok' : outcome.failure.code),
    failedAuthLimitReached() {},
    recordAnswer() {},
    recordRefusal() {},
    close: async () => {},
  }
  return { gate: createGate({ authenticate, recorder }), recorded }
}
