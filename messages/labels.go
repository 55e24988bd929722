package messages

// LabelArgs: meta.label, changes to a path's tags and key/value metadata
// (tags and keys: 1-128 bytes without '='; values up to 4096 bytes).
type LabelArgs struct {
	Path   string            `json:"path"`
	Tags   []string          `json:"tags,omitempty"`
	Untags []string          `json:"untags,omitempty"`
	Set    map[string]string `json:"set,omitempty"`
	Unset  []string          `json:"unset,omitempty"`
}

// LabelsResult: meta.label and meta.get, a path's labels after.
type LabelsResult struct {
	Path string            `json:"path"`
	Tags []string          `json:"tags"`
	Meta map[string]string `json:"meta"`
}
