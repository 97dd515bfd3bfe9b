export { API_PREFIX, pathOf } from './api-path.ts'
export { type BearerChallenge, bearerChallenge, quoteString, REALM } from './challenge.ts'
export { type FailureResponse, failureResponse } from './failure-response.ts'
export {
  PROBLEM_CONTENT_TYPE,
  PROBLEM_TYPE_BASE,
  PROBLEMS,
  type ProblemCode,
  type ProblemDetails,
  problem,
  problemType,
} from './problem.ts'
