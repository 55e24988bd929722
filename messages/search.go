package messages

// Search and tree walks: search.query and search.reindex (the full-text
// index), file.grep and file.find.

// SearchArgs: search.query, an SQLite FTS5 query ("fox", "fox AND dog",
// "\"brown fox\"", "fo*"); Limit 0 is 100.
type SearchArgs struct {
	Query string `json:"query"`
	Limit int    `json:"limit,omitempty"`
}

// SearchHit is one matching file: a snippet with the matches in [ ] and
// its bm25 score (lower is better).
type SearchHit struct {
	Path    string  `json:"path"`
	Snippet string  `json:"snippet"`
	Score   float64 `json:"score"`
}

// SearchResult: search.query, best first.
type SearchResult struct {
	Query string      `json:"query"`
	Hits  []SearchHit `json:"hits"`
}

// ReindexResult: search.reindex, how many files it looked at.
type ReindexResult struct {
	Files int64 `json:"files"`
}

// GrepArgs: file.grep, an RE2 regular expression over the lines of the
// text files below Path (default /); Limit 0 is 1000 matching lines.
type GrepArgs struct {
	Pattern    string `json:"pattern"`
	Path       string `json:"path,omitempty"`
	IgnoreCase bool   `json:"ignore_case,omitempty"`
	Limit      int    `json:"limit,omitempty"`
}

// GrepMatch is one matching line (1-based).
type GrepMatch struct {
	Path string `json:"path"`
	Line int    `json:"line"`
	Text string `json:"text"`
}

// GrepResult: file.grep, in path and line order; Truncated when it
// stopped at the limit.
type GrepResult struct {
	Matches   []GrepMatch `json:"matches"`
	Truncated bool        `json:"truncated"`
}

// FindArgs: file.find, the entries below Path (default /) that pass every
// filter given: Name a glob on the entry's name, Type file|dir|symlink,
// sizes in bytes (MaxSize 0: none), Depth levels below Path (0: all),
// every tag of Tags and every key=value of Meta.
type FindArgs struct {
	Path    string            `json:"path,omitempty"`
	Name    string            `json:"name,omitempty"`
	Type    string            `json:"type,omitempty"`
	MinSize int64             `json:"min_size,omitempty"`
	MaxSize int64             `json:"max_size,omitempty"`
	Depth   int               `json:"depth,omitempty"`
	Tags    []string          `json:"tags,omitempty"`
	Meta    map[string]string `json:"meta,omitempty"`
}

// FindResult: file.find, in path order.
type FindResult struct {
	Path    string  `json:"path"`
	Entries []Entry `json:"entries"`
}
