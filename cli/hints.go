package cli

import (
	"fmt"
	"path"
	"strings"

	"github.com/spf13/cobra"

	"github.com/avfs/avfs/messages"
)

// hint is the next command to run after error e of cmd, or "". It is
// printed under the error for a person and as error.hint in JSON.
func (a *app) hint(cmd *cobra.Command, e *messages.Error) string {
	name := ""
	if cmd != nil {
		name = cmd.Name()
	}
	p, _ := e.Details["path"].(string)
	switch e.Code {
	case messages.CodeInvalidPath:
		if p != "" && !strings.HasPrefix(p, "/") {
			return fmt.Sprintf("vault paths start with / (the vault root): try /%s", p)
		}
		return "vault paths are absolute (/ is the vault root) and may not contain .. or empty parts"
	case messages.CodeNotFound:
		switch name {
		case "write", "mkdir":
			return fmt.Sprintf("the parent directory %s does not exist: use -p to create it (avfs %s -p %s ...)", path.Dir(p), name, p)
		case "import", "export", "":
			return ""
		}
		if p != "" {
			return fmt.Sprintf("see what is there: avfs ls %s", path.Dir(p))
		}
	case messages.CodeAlreadyExists:
		if name == "mkdir" {
			return "use -p to accept an existing directory"
		}
	case messages.CodeNotEmpty:
		if name != "rm" && name != "rmdir" {
			// mv or cp onto a directory with entries: deleting it
			// would lose them; naming a place inside it does not.
			return fmt.Sprintf("%s has entries: name a path inside it, or see them with avfs ls %s", p, p)
		}
		return fmt.Sprintf("remove it with everything in it: avfs rm -r %s", p)
	case messages.CodeIsADirectory:
		switch name {
		case "rm", "cp":
			return fmt.Sprintf("%s is a directory: use -r", p)
		case "cat":
			return fmt.Sprintf("%s is a directory: avfs ls %s", p, p)
		}
	case messages.CodeVaultNotFound:
		v := a.lastVault
		if v == "" {
			v = "NAME"
		}
		return fmt.Sprintf("list the vaults with `avfs vault list`, or create this one with `avfs vault create %s`", v)
	case messages.CodeVaultExists:
		return "choose another name, or list them with `avfs vault list`"
	case messages.CodeCheckpointNotFound:
		return "list the checkpoints with `avfs checkpoint list`"
	case messages.CodeCheckpointExists:
		return "choose another name, or delete the old one with `avfs checkpoint delete NAME`"
	case messages.CodeMergeConflict:
		fork, _ := e.Details["fork"].(string)
		return fmt.Sprintf("list the conflicts with `avfs vault merge %s --dry-run`, resolve them with --strategy ours|theirs", fork)
	case messages.CodeQuotaExceeded:
		if l, ok := e.Details["limit"].(string); ok {
			return fmt.Sprintf("raise the limit with `avfs quota set %s VALUE` (or `none`)", l)
		}
	case messages.CodeApprovalRequired:
		if id, ok := e.Details["approval_id"].(string); ok {
			return approvalHint(id)
		}
		return "list what waits with `avfs approval list`"
	case messages.CodeApprovalNotFound, messages.CodeApprovalExpired:
		return "list the approvals with `avfs approval list`"
	case messages.CodePolicyDenied:
		return "`avfs policy show` lists the rules; `avfs policy check -- CMD` explains a decision"
	case messages.CodeUnavailable:
		if !a.fleetAsked() {
			return "" // no fleet involved: the message says what failed here
		}
		return "is the fleet up? `avfs fleet status`; without --nats (and AVFS_NATS_URL) avfs works on the vaults under --home"
	case messages.CodeInvalidArgument:
		if strings.HasPrefix(e.Message, "no vault chosen") {
			return "list the vaults with `avfs vault list`"
		}
	}
	return ""
}

// fleetAsked reports whether the command line goes to a fleet: --nats,
// AVFS_NATS_URL, or an avfs serve running on the home.
func (a *app) fleetAsked() bool {
	if _, ok := a.client.(natsClient); ok {
		return true
	}
	return a.cfg != nil && (a.cfg.NATS.URL != "" || runningServe(a.cfg.Home) != "")
}

// usageHint is the hint of a usage error: the command's help.
func usageHint(cmd *cobra.Command, msg string) string {
	if cmd == nil || strings.Contains(msg, "--help") {
		return ""
	}
	return fmt.Sprintf("see `%s --help`", cmd.CommandPath())
}

// approvalHint says how to answer a held command.
func approvalHint(id string) string {
	return fmt.Sprintf("an operator can run it with `avfs approval grant %s` (or refuse: `avfs approval deny %s --reason TEXT`)", id, id)
}

// EnvelopeHint is the next command after an exec that did not run: the
// grant command of one held for approval, where to read the rules for a
// denied one; "" otherwise.
func EnvelopeHint(e messages.Envelope) string {
	switch e.Status {
	case messages.StatusApprovalRequired:
		if e.ApprovalID != nil {
			return approvalHint(*e.ApprovalID)
		}
	case messages.StatusDenied:
		return fmt.Sprintf("denied by rule %s: `avfs policy show` lists the rules", e.Decision.Rule)
	}
	return ""
}
