// Package policy decides whether an agent's command may run in a vault's
// workspace, before exec runs it: allow, allow with a checkpoint first,
// hold for an operator's approval, or deny.
//
// It owns the rule model (Rule, loaded from configuration as data), the
// default rule set, and the reading of commands: an argv (Check) or a shell
// script (CheckShell). It imports nothing else of this module and keeps no
// state besides an immutable Policy.
//
// Invariants:
//   - Rules are tried in order and the first match decides; a command that
//     none matches gets the policy's fallback under the rule name "default".
//   - Nothing hides a command. Every command of a shell script is decided
//     (pipelines, lists, subshells, substitutions, compound-command and
//     function bodies, redirections), and so is every command a wrapper runs
//     (env, timeout, xargs, sh -c, eval, find -exec, ...). The strictest
//     decision wins: Deny > RequireApproval > AllowWithCheckpoint > Allow.
//   - What cannot be read statically is denied: a script that does not
//     parse, a program name only known at run time (`$X args`), shells nested
//     too deeply to follow.
//   - Paths are judged against the workspace root without touching the file
//     system: absolute paths elsewhere, ../ escapes and ~ are outside; the
//     shared /tmp and a few device files such as /dev/null are not.
//
// The policy is a guardrail for an agent working in a checkpointed vault, not
// a sandbox: a program that runs commands from its own input (a script file,
// make, awk's system(), git aliases) is decided by its own name only.
package policy
