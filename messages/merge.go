package messages

// VaultMergeArgs: vault.merge; the request's Vault is the target (ours),
// Fork the vault whose changes since its fork point are brought in
// (theirs), in the same namespace.
type VaultMergeArgs struct {
	Fork string `json:"fork"`
	// Paths limits the merge to entries matching one of these globs: one
	// with a '/' matches the path from the root ("/src/*.go"), one without
	// an entry's name at any depth ("*.go"); below a matching directory
	// everything matches.
	Paths []string `json:"paths,omitempty"`
	// DryRun computes the merge and applies nothing.
	DryRun bool `json:"dry_run,omitempty"`
	// Strategy resolves conflicts: MergeOurs keeps the target's side,
	// MergeTheirs takes the fork's (for a text file only its conflicting
	// hunks); "" leaves them, and then nothing is applied.
	Strategy string `json:"strategy,omitempty"`
}

// Merge strategies (VaultMergeArgs.Strategy).
const (
	MergeOurs   = "ours"
	MergeTheirs = "theirs"
)

// MergeConflict is an entry both sides changed in ways a merge cannot
// combine. Base is the fork point's side, Ours the target's, Theirs the
// fork's: content hashes as `log` shows them (SHA-256 of a file's chunk
// list, of a symlink's target; "" when absent or without content), and
// entry types ("" when absent).
type MergeConflict struct {
	Path       string `json:"path"`
	Kind       string `json:"kind"`
	Base       string `json:"base"`
	Ours       string `json:"ours"`
	Theirs     string `json:"theirs"`
	BaseType   string `json:"base_type"`
	OursType   string `json:"ours_type"`
	TheirsType string `json:"theirs_type"`
	Hunks      int    `json:"hunks,omitempty"`
	Resolved   string `json:"resolved,omitempty"`
}

// MergeResult: vault.merge.
type MergeResult struct {
	Into      string `json:"into"`
	Fork      string `json:"fork"`
	ForkPoint string `json:"fork_point"` // RFC 3339: when the fork was made
	DryRun    bool   `json:"dry_run"`
	Strategy  string `json:"strategy"`
	Applied   bool   `json:"applied"`
	// Checkpoint was taken just before the merge changed the target:
	// restoring it undoes the merge ("" when none was taken).
	Checkpoint string          `json:"checkpoint"`
	Changes    ChangeSummary   `json:"changes"`
	Merged     []string        `json:"merged"`
	Conflicts  []MergeConflict `json:"conflicts"`
}

// OpVaultPush is a peer request (SubjectPeer, never sent by clients): the
// worker that serves a vault.merge asks the fork's owner to push the
// fork's current state (messages/handoff.go) and answers with the Head
// of that push, which the asker then pulls read-only under a name of its
// own. Namespace-scoped on the subject; the vault is in PushArgs. On the
// request subjects it is an unknown op (INVALID_ARGUMENT).
const OpVaultPush Op = "vault.push"

// PushArgs: vault.push.
type PushArgs struct {
	Vault string `json:"vault"`
}
