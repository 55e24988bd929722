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
// With Spec.Sandbox the command is confined (sandbox_linux.go,
// confine_linux.go, cgroup_linux.go). Run starts /proc/self/exe in new
// mount, PID, IPC, UTS and (unless Network) network namespaces with
// AVFS_SANDBOX_INIT set; Init, which the binary's main (a test binary's
// TestMain) calls first, turns that process into the sandbox's init. Run
// refuses to sandbox from a binary that never called Init. Invariants:
//   - The init is PID 1 of the namespace and the command its child: signals
//     Run sends the group reach the command with their usual effect, the
//     init reports the command's exit status or signal through a pipe, and
//     when it exits the kernel kills whatever is left in the namespace.
//     It dies with the worker (Pdeathsig).
//   - The command's root is a read-only tmpfs holding only Sandbox.Binds
//     (each at its host path), Sandbox.Hide covered by empty directories,
//     a private size-capped /tmp, a minimal /dev and the namespace's own
//     /proc with its kernel knobs read-only. No mount propagates to the
//     host; the host's root is detached.
//   - The command has no capability, cannot gain one (no_new_privs,
//     securebits), and seccomp refuses it new namespaces and mounts.
//   - The worker never enters a FUSE mount in a vfork'd child: the init
//     is a separate process that chdirs for the command (see EnterDir).
//   - A sandbox that cannot be built is ErrSandbox, and nothing of the
//     command ran.
//   - What the seccomp filter stops, and without Network every connect
//     off the loopback, is recorded (Result.Refused) before the call
//     returns.
//
// With Sandbox.Pool the init is kept between runs (zygote_linux.go): a
// zygote per layout, PID 1 of its namespaces with the root built once,
// forks each command from a thread of its own that has unshared a mount
// and an IPC namespace, mounted a fresh /tmp and /dev/shm, attached the
// writable binds (detached mounts Run passes over a socket) and been
// confined. Invariants: a zygote runs one command at a time; when the
// command's leader exits it kills everything else in its PID namespace
// before it reports; the command reaches it only through its socket's
// protocol, never its descriptors or memory (non-dumpable, capabilities
// the command lacks); runs with Network never use it. Lock order: Pool.mu
// only; a zygote is owned by one Run or by the idle list.
//
// Only Linux is supported.
package exec
