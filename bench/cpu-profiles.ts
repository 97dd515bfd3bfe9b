/**
 * Which of the `.cpuprofile` files `node --cpu-prof` left in a directory holds the main
 * thread's profile of the process's end (the loaded window bench/profile.ts reads). Not simply
 * the first by name: the directory holds one per thread (`CPU.<date>.<time>.<pid>.<thread>.
 * <seq>.cpuprofile`; thread 1 is e.g. SQLite's writer) and one per image of a process that
 * restarts itself with execve (bench/servers/tokengate.ts, for glibc's malloc settings): the
 * first image's ~0.5 s of start-up sorts first whenever the restart crosses a second.
 */
export interface WrittenProfile {
  readonly file: string
  /** The profile's own `endTime` (µs, monotonic: comparable across an execve). */
  readonly endTime: number
}

/** The main thread's profile that ended last; undefined when none is a main thread's. */
export function loadedProfile(profiles: readonly WrittenProfile[]): string | undefined {
  const mainThread = profiles.filter(({ file }) =>
    /^CPU\.\d+\.\d+\.\d+\.0\.\d+\.cpuprofile$/.test(file),
  )
  return mainThread.reduce<WrittenProfile | undefined>(
    (last, profile) => (last === undefined || profile.endTime > last.endTime ? profile : last),
    undefined,
  )?.file
}
