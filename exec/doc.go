// Package exec runs one top-level command for an agent and reports what
// happened honestly: exit code or signal, timeout or cancellation, and the
// output it produced, capped but with its true size.
//
// It owns the lifecycle of that command's process group and nothing else:
// policy, mounts and envelopes belong to the callers. It imports no other
// package of this repository.
//
// Invariants:
//   - Every command runs in its own process group. When Run returns, no
//     member of that group is left alive: on timeout or cancellation the
//     group gets SIGTERM, then SIGKILL after the grace period, and after
//     the leader exits, for whatever reason, the group gets SIGKILL so that
//     background children cannot outlive the run. The leader is not reaped
//     until that kill has been sent, so its pid (the group id) cannot have
//     been reused by an unrelated process.
//   - Memory is bounded by Spec.MaxOutput per stream, however much the
//     command writes; the byte counts in Result are always the true totals.
//   - Run never waits unboundedly for output: a process that escaped the
//     group (setsid, double fork into a new group) and keeps stdout or
//     stderr open is cut off after a short drain period. Such a process is
//     outside our reach and is not killed.
//   - The child's environment is exactly Spec.Env; the worker's own
//     environment never leaks in (build Env with BuildEnv).
//
// Only Linux is supported.
package exec
