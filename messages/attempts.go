package messages

// Attempt is one fork of a parallel attempts run and what its command did.
type Attempt struct {
	Vault    string      `json:"vault"`
	Command  string      `json:"command"`
	Envelope *Envelope   `json:"envelope,omitempty"`
	Error    *Error      `json:"error,omitempty"`
	Fork     *ForkResult `json:"fork,omitempty"`
}

// AttemptsResult is what `avfs attempts run` prints as JSON, and what
// the Go client's RunAttempts returns.
type AttemptsResult struct {
	From     string    `json:"from"`
	Attempts []Attempt `json:"attempts"`
	Best     *string   `json:"best"` // the fastest attempt that exited 0
	Kept     []string  `json:"kept"`
	// Merge is the merge of the best attempt back into From, when asked
	// for (`--merge best`); MergeError says why it did not happen (no
	// attempt exited 0, conflicts: MERGE_CONFLICT with its details).
	Merge      *MergeResult `json:"merge,omitempty"`
	MergeError *Error       `json:"merge_error,omitempty"`
}
