package messages

// File history (the history.* ops): every committed write of a file is a
// version, metadata only, content by hash.

// HistoryLogArgs: history.log; Limit > 0 keeps the latest Limit versions.
type HistoryLogArgs struct {
	Path  string `json:"path"`
	Limit int    `json:"limit,omitempty"`
}

// FileVersion is one recorded state of a file. Hash is the SHA-256 of its
// chunk list (hex): equal contents, equal hashes.
type FileVersion struct {
	Version   int64  `json:"version"`
	Size      int64  `json:"size"`
	CreatedAt string `json:"created_at"`
	Hash      string `json:"hash"`
}

// HistoryLogResult: history.log, oldest first.
type HistoryLogResult struct {
	Path     string        `json:"path"`
	Versions []FileVersion `json:"versions"`
}

// HistoryVersionArgs: history.cat and history.checkout (Version 0: the
// latest), history.revert (Version unused).
type HistoryVersionArgs struct {
	Path    string `json:"path"`
	Version int64  `json:"version,omitempty"`
}

// HistoryCatResult: history.cat, a CatResult with the version it shows.
type HistoryCatResult struct {
	CatResult
	Version int64 `json:"version"`
}

// HistoryWriteResult: history.checkout and history.revert: the write they
// made and the version whose content it wrote back.
type HistoryWriteResult struct {
	Path    string `json:"path"`
	Size    int64  `json:"size"`
	Version int64  `json:"version"`
}

// HistoryDiffArgs: history.diff between Path (version V1) and Path2
// (version V2); an empty Path2 is Path; version 0 is the current file,
// except that with one path and no versions V1 is the version before the
// latest.
type HistoryDiffArgs struct {
	Path  string `json:"path"`
	Path2 string `json:"path2,omitempty"`
	V1    int64  `json:"v1,omitempty"`
	V2    int64  `json:"v2,omitempty"`
}

// HistoryDiffResult: history.diff: a unified line diff, empty when the
// two are equal; binary content is reported, not diffed.
type HistoryDiffResult struct {
	From   string `json:"from"`
	To     string `json:"to"`
	Binary bool   `json:"binary"`
	Equal  bool   `json:"equal"`
	Diff   string `json:"diff"`
}

// HistoryPruneArgs: history.prune; OlderThan is a Go duration ("72h").
type HistoryPruneArgs struct {
	Keep      int64  `json:"keep,omitempty"`
	OlderThan string `json:"older_than,omitempty"`
	DryRun    bool   `json:"dry_run,omitempty"`
}

// HistoryPruneResult: history.prune.
type HistoryPruneResult struct {
	Versions int64 `json:"versions"`
	Paths    int64 `json:"paths"`
	DryRun   bool  `json:"dry_run"`
}

// HistorySettings are a vault's history retention: Keep versions per path
// (0: all), none older than MaxAge, and writes within Coalesce of a
// version folded into it (durations as Go strings, "" or "0s": off).
type HistorySettings struct {
	Keep     int64  `json:"keep"`
	MaxAge   string `json:"max_age"`
	Coalesce string `json:"coalesce"`
}

// HistorySetArgs: history.set.
type HistorySetArgs = HistorySettings

// HistoryResult: history.get and history.set.
type HistoryResult struct {
	History HistorySettings `json:"history"`
}
