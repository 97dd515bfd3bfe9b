/**
 * An outcome recorder that only keeps the answers a front end records (`recordAnswer`), for
 * tests of when and whether an answer is recorded.
 */
import type { Answer, OutcomeRecorder } from '../../src/auth/outcome-recorder.ts'

export function answerRecorder(): { recorder: OutcomeRecorder; answers: Answer[] } {
  const answers: Answer[] = []
  const recorder: OutcomeRecorder = {
    timesAuthentication: false,
    recordsAnswers: true,
    recordOutcome() {},
    failedAuthLimitReached() {},
    recordAnswer: (answer) => void answers.push(answer),
    recordRefusal() {},
    close: async () => {},
  }
  return { recorder, answers }
}
