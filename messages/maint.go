package messages

// Maintenance and per-vault settings: vault.settings, vault.set,
// maint.stats, maint.compact, maint.run and audit.clear. Store-wide
// figures are those of the store that holds the addressed vault (in a
// fleet, its owner's).

// VaultSettings are a vault's settings, the store's defaults filled in;
// Inherited names the keys the vault does not set itself.
type VaultSettings struct {
	// AutoKeep is how many auto-checkpoints the vault keeps (0: all).
	AutoKeep int64 `json:"auto_keep"`
	// AutoMaxAge drops auto-checkpoints older than this ("0s": never).
	AutoMaxAge string `json:"auto_max_age"`
	// QuotaMode is what max_size_mb counts: "logical" (file sizes) or
	// "unique" (bytes of the distinct chunks the live tree references).
	QuotaMode string `json:"quota_mode"`
	// ExpiresAt is when the vault's owner deletes it (RFC 3339); null:
	// never.
	ExpiresAt *string `json:"expires_at"`
	// Replication is when a fleet acknowledges a change: "sync" (once
	// the fleet's change log holds it), "async" (at once; the log holds
	// it right after) or "checkpoint" (at once; the fleet holds only the
	// vault's pushes).
	Replication string   `json:"replication,omitempty"`
	Inherited   []string `json:"inherited"`
}

// VaultSetArgs: vault.set changes one setting. Key is auto_keep (a whole
// number), auto_max_age (a duration), quota_mode (logical or unique),
// replication (sync, async or checkpoint) or ttl (a duration from now,
// or "none"); Value "default" makes the vault take the store's default
// again.
type VaultSetArgs struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// VaultSettingsResult: vault.settings and vault.set.
type VaultSettingsResult struct {
	Settings VaultSettings `json:"settings"`
}

// VaultStats is what one vault holds.
type VaultStats struct {
	Namespace       string `json:"namespace"`
	Name            string `json:"name"`
	Files           int64  `json:"files"`
	Dirs            int64  `json:"dirs"`
	Checkpoints     int64  `json:"checkpoints"`
	AutoCheckpoints int64  `json:"auto_checkpoints"`
	Versions        int64  `json:"versions"`
	LogicalBytes    int64  `json:"logical_bytes"`
	UniqueBytes     int64  `json:"unique_bytes"`
	AuditEvents     int64  `json:"audit_events"`
}

// GCCounts is what a garbage collection frees (or would free).
type GCCounts struct {
	Nodes  int64 `json:"nodes"`
	Chunks int64 `json:"chunks"`
	Bytes  int64 `json:"bytes"`
}

// StoreStats is what a whole store holds: Orphans is what gc would free,
// FreeBytes the pages inside the database file that compact gives back.
type StoreStats struct {
	Vaults       int64    `json:"vaults"`
	Files        int64    `json:"files"`
	Dirs         int64    `json:"dirs"`
	Nodes        int64    `json:"nodes"`
	Versions     int64    `json:"versions"`
	Chunks       int64    `json:"chunks"`
	ChunkBytes   int64    `json:"chunk_bytes"`
	LogicalBytes int64    `json:"logical_bytes"`
	AuditEvents  int64    `json:"audit_events"`
	Orphans      GCCounts `json:"orphans"`
	DBBytes      int64    `json:"db_bytes"`
	WALBytes     int64    `json:"wal_bytes"`
	FreeBytes    int64    `json:"free_bytes"`
}

// StatsResult: maint.stats; Vault is null when no vault was addressed
// (in-process only).
type StatsResult struct {
	Vault *VaultStats `json:"vault"`
	Store StoreStats  `json:"store"`
}

// CompactResult: maint.compact: the database and its log before and
// after.
type CompactResult struct {
	BeforeBytes int64 `json:"before_bytes"`
	AfterBytes  int64 `json:"after_bytes"`
	FreedBytes  int64 `json:"freed_bytes"`
}

// MaintainResult: maint.run: retention applied to every vault of the
// store (file versions and auto-checkpoints dropped), expired vaults
// deleted (in-process only: a worker sweeps its own), then gc, the
// full-text index optimized, and compact.
type MaintainResult struct {
	Vaults          int64         `json:"vaults"`
	Versions        int64         `json:"versions"`
	AutoCheckpoints int64         `json:"auto_checkpoints"`
	Expired         []string      `json:"expired"`
	Freed           GCCounts      `json:"freed"`
	Compact         CompactResult `json:"compact"`
	DurationMS      float64       `json:"duration_ms"`
}

// AuditClearArgs: audit.clear deletes the vault's audit events from
// before Before (RFC 3339, or a duration ago like 720h); the last minute
// and the vault's newest event always stay.
type AuditClearArgs struct {
	Before string `json:"before"`
	DryRun bool   `json:"dry_run,omitempty"`
}

// AuditClearResult: audit.clear; Events is how many went (or would go).
type AuditClearResult struct {
	Events int64  `json:"events"`
	Before string `json:"before"`
	DryRun bool   `json:"dry_run"`
}
