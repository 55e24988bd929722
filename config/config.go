package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// Config is the effective configuration.
type Config struct {
	Home      string    `mapstructure:"home"`
	Vault     string    `mapstructure:"vault"`
	Namespace string    `mapstructure:"namespace"`
	Actor     string    `mapstructure:"actor"`
	LogLevel  string    `mapstructure:"log_level"`
	Store     Store     `mapstructure:"store"`
	NATS      NATS      `mapstructure:"nats"`
	Exec      Exec      `mapstructure:"exec"`
	Sandbox   Sandbox   `mapstructure:"sandbox"`
	Policy    Policy    `mapstructure:"policy"`
	Telemetry Telemetry `mapstructure:"telemetry"`
	Runtime   Runtime   `mapstructure:"runtime"`
	Approvals struct {
		TTL time.Duration `mapstructure:"ttl"`
	} `mapstructure:"approvals"`
	Checkpoints Checkpoints `mapstructure:"checkpoints"`
	Quota       Quota       `mapstructure:"quota"`
	// Replication is when a fleet acknowledges a change of a vault that
	// sets no mode of its own (avfs vault set replication): sync (once
	// the fleet's change log holds it; the default), async (at once, the
	// log holds it right after) or checkpoint (no log: the fleet holds
	// the vault's last push).
	Replication string `mapstructure:"replication"`
	Mount       Mount  `mapstructure:"mount"`
	Fleet       Fleet  `mapstructure:"fleet"`
}

// Fleet tunes membership and upkeep of a fleet (avfs serve, worker,
// dispatcher). Every worker and dispatcher of a fleet applies these, so
// set them alike.
type Fleet struct {
	// Heartbeat is how often workers and dispatchers put their heartbeat
	// in the members bucket, and how often a dispatcher looks for dead
	// workers (it takes a worker for dead on two looks in a row).
	Heartbeat time.Duration `mapstructure:"heartbeat"`
	// MemberTTL is the members bucket's TTL: a member is gone this long
	// after its last heartbeat. At least twice Heartbeat. A SIGKILLed
	// owner's vaults are served again within about MemberTTL + 2 ×
	// Heartbeat plus the takeover (BenchmarkFailover).
	MemberTTL time.Duration `mapstructure:"member_ttl"`
	// GCInterval is how often a worker runs the fleet's chunk garbage
	// collection (avfs fleet gc) in the background: each worker tries
	// once per interval, and the sweep's announcement lets one run at a
	// time. 0 turns it off.
	GCInterval time.Duration `mapstructure:"gc_interval"`
}

// Check refuses fleet timings that would take live workers for dead.
func (f Fleet) Check() error {
	if f.Heartbeat <= 0 {
		return fmt.Errorf("fleet.heartbeat %v: want more than 0", f.Heartbeat)
	}
	if f.MemberTTL < 2*f.Heartbeat {
		return fmt.Errorf("fleet.member_ttl %v: want at least twice fleet.heartbeat (%v)", f.MemberTTL, f.Heartbeat)
	}
	if f.GCInterval < 0 {
		return fmt.Errorf("fleet.gc_interval %v: want 0 (off) or more", f.GCInterval)
	}
	return nil
}

// Mount tunes the FUSE mounts this home serves (avfs mount, exec).
type Mount struct {
	// Passthrough lets the kernel read and write files of 1 MiB and more
	// straight through copies of their content kept in a cache under the
	// home (FUSE passthrough, Linux 6.9+): avfs mount's and exec's mounts.
	// While open, a copy is private to its file, so every descriptor sees
	// every write (docs/decisions.md §32 and the passthrough section after
	// it). On by default.
	Passthrough bool `mapstructure:"passthrough"`
	// ContentCacheMB bounds that cache ($AVFS_HOME/content-cache), least
	// recently used out.
	ContentCacheMB int64 `mapstructure:"content_cache_mb"`
	// WakeHere lets a process that serves mounts set the fuse module
	// parameter wake_here to Y, on kernels that have it: the kernel then
	// wakes a mount's server on the CPU of the request, about halving a
	// request's round trip on a small VM. It is the machine's setting,
	// for every FUSE mount, and stays after avfs exits
	// (mount.WakeServersHere, docs/decisions.md §46). On by default.
	WakeHere bool `mapstructure:"wake_here"`
}

// ContentCacheDir is where passthrough mounts keep file content.
func (c Config) ContentCacheDir() string { return filepath.Join(c.Home, "content-cache") }

// Checkpoints is the retention of auto-checkpoints (the ones exec takes)
// for vaults that set none of their own (avfs vault set); named
// checkpoints are never pruned.
type Checkpoints struct {
	// AutoKeep is how many a vault keeps (0: all).
	AutoKeep int64 `mapstructure:"auto_keep"`
	// AutoMaxAge drops older ones (0: no limit).
	AutoMaxAge time.Duration `mapstructure:"auto_max_age"`
}

// Quota is the default of vaults' quota settings.
type Quota struct {
	// Mode is what max_size_mb counts: logical (file sizes) or unique
	// (bytes of the distinct chunks the live tree references).
	Mode string `mapstructure:"mode"`
}

// Store configures the vault database.
type Store struct {
	Synchronous string `mapstructure:"synchronous"`
	// MaxFileSize is the largest file, in bytes, in any vault of the
	// store (vault.Options.MaxFileSize): larger ones fail with EFBIG.
	MaxFileSize int64 `mapstructure:"max_file_size"`
}

// NATS says how to reach a fleet. Secrets are never printed.
type NATS struct {
	URL      string `mapstructure:"url"`
	Creds    string `mapstructure:"creds"`
	User     string `mapstructure:"user"`
	Password string `mapstructure:"password"`
	Token    string `mapstructure:"token"`
	NKey     string `mapstructure:"nkey"`
	// InboxPrefix is where replies come back to this process ("" is
	// NATS's _INBOX). An agent confined to a namespace sets it to the
	// prefix its permissions let it subscribe to, _INBOX.<namespace> in
	// docs/nats-permissions.example.conf. It must start with _INBOX:
	// fleet processes reply to nothing else.
	InboxPrefix string `mapstructure:"inbox_prefix"`
	// Replicas of the fleet's streams and buckets: 1 on one server, 3 on
	// a cluster. Every worker and dispatcher applies it, so set it alike.
	Replicas int `mapstructure:"replicas"`
	// MaxRequestBytes caps one request in the fleet's streams; DLQ bounds
	// the dead-letter stream. Every worker and dispatcher applies them.
	MaxRequestBytes int32 `mapstructure:"max_request_bytes"`
	DLQ             struct {
		MaxBytes int64         `mapstructure:"max_bytes"`
		MaxAge   time.Duration `mapstructure:"max_age"`
	} `mapstructure:"dlq"`
	TLS struct {
		Cert string `mapstructure:"cert"`
		Key  string `mapstructure:"key"`
		CA   string `mapstructure:"ca"`
	} `mapstructure:"tls"`
}

// Exec configures command runs.
type Exec struct {
	Timeout   time.Duration `mapstructure:"timeout"`
	Grace     time.Duration `mapstructure:"grace"`
	MaxOutput int           `mapstructure:"max_output"`
	EnvAllow  []string      `mapstructure:"env_allow"`
	// MaxRuns is how many background runs (exec --detach) a vault may
	// have going at once.
	MaxRuns int `mapstructure:"max_runs"`
	// Keeper lets a local exec (no server) hand its command to the home's
	// exec keeper, a background avfs that keeps the vault mounted and a
	// sandbox init started between commands (docs/decisions.md §25);
	// false runs every exec in the CLI's own process.
	Keeper bool `mapstructure:"keeper"`
	// KeeperIdle is how long a keeper waits for the next exec before it
	// unmounts and exits.
	KeeperIdle time.Duration `mapstructure:"keeper_idle"`
}

// Sandbox says how exec confines commands (README: "Sandbox").
type Sandbox struct {
	Mode string `mapstructure:"mode"` // namespaces (default) | none
	// Fallback runs commands unsandboxed on a machine that cannot make
	// namespaces, instead of failing them.
	Fallback bool `mapstructure:"fallback"`
	Network  bool `mapstructure:"network"` // every command gets the host's network
	// Binds are host paths shown to commands besides the system's and the
	// toolchains': "PATH" read-only, "PATH:rw" writable.
	Binds     []string       `mapstructure:"binds"`
	TmpSizeMB int64          `mapstructure:"tmp_size_mb"`
	Limits    SandboxLimits  `mapstructure:",squash"`
	Vaults    []SandboxVault `mapstructure:"vaults"`
}

// SandboxLimits are cgroup limits; 0 = none.
type SandboxLimits struct {
	MemoryMB int64   `mapstructure:"memory_mb"`
	Pids     int     `mapstructure:"pids"`
	CPUs     float64 `mapstructure:"cpus"`
}

// SandboxVault overrides the sandbox for one vault: a mode, a network
// grant, and limits (0 keeps the general one).
type SandboxVault struct {
	Namespace string        `mapstructure:"namespace"` // "" = default
	Vault     string        `mapstructure:"vault"`
	Mode      string        `mapstructure:"mode"`
	Network   bool          `mapstructure:"network"`
	Limits    SandboxLimits `mapstructure:",squash"`
}

// Telemetry configures tracing. The standard OTEL_* environment variables
// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
// OTEL_TRACES_SAMPLER) take precedence over these settings.
type Telemetry struct {
	Exporter    string            `mapstructure:"exporter"` // none | otlp-http
	Endpoint    string            `mapstructure:"endpoint"`
	Headers     map[string]string `mapstructure:"headers"`
	Insecure    bool              `mapstructure:"insecure"`
	SampleRatio float64           `mapstructure:"sample_ratio"`
	ServiceName string            `mapstructure:"service_name"`
}

// Runtime tunes the Go runtime of the long-lived fleet processes (`avfs
// serve`, `worker`, `dispatcher`); other commands keep Go's defaults. The
// GOGC and GOMEMLIMIT environment variables win over these settings.
type Runtime struct {
	// GCPercent is the collector's target (GOGC): the heap may grow this
	// many percent over what is live before a collection. Streaming a
	// large file makes much short-lived garbage (chunk copies, the NATS
	// server's 8 MiB block loads); 25 keeps a 1 GiB write under 64 MB of
	// growth (BENCHMARKS.md, "Large files through the fleet"). 1 or more;
	// 100 is Go's default.
	GCPercent int `mapstructure:"gc_percent"`
	// MemoryLimitMB is a soft limit on the Go runtime's memory in MiB
	// (debug.SetMemoryLimit, GOMEMLIMIT): near it the collector runs
	// more often. 0 = none.
	MemoryLimitMB int64 `mapstructure:"memory_limit_mb"`
}

// Policy configures the policy engine; empty Rules means the built-in set.
type Policy struct {
	Rules    []map[string]any `mapstructure:"rules"`
	Fallback string           `mapstructure:"fallback"`
}

// secretKeys are shown as "***" by Show.
var secretKeys = []string{"nats.password", "nats.token", "nats.nkey", "nats.creds"}

// DefaultHome is ~/.avfs.
func DefaultHome() string {
	h, err := os.UserHomeDir()
	if err != nil || h == "" {
		return ".avfs"
	}
	return filepath.Join(h, ".avfs")
}

func defaults(v *viper.Viper) {
	v.SetDefault("home", DefaultHome())
	v.SetDefault("vault", "")
	v.SetDefault("namespace", "default")
	v.SetDefault("actor", "")
	v.SetDefault("log_level", "warn")
	v.SetDefault("store.synchronous", "NORMAL")
	v.SetDefault("store.max_file_size", int64(1<<60))
	v.SetDefault("nats.url", "")
	v.SetDefault("nats.replicas", 1)
	v.SetDefault("nats.inbox_prefix", "")
	v.SetDefault("nats.max_request_bytes", 8<<20)
	v.SetDefault("nats.dlq.max_bytes", 256<<20)
	v.SetDefault("nats.dlq.max_age", 7*24*time.Hour)
	for _, k := range []string{"creds", "user", "password", "token", "nkey", "tls.cert", "tls.key", "tls.ca"} {
		v.SetDefault("nats."+k, "")
	}
	v.SetDefault("exec.timeout", 300*time.Second)
	v.SetDefault("exec.grace", 5*time.Second)
	v.SetDefault("exec.max_output", 1<<20)
	v.SetDefault("exec.env_allow", []string{})
	v.SetDefault("exec.max_runs", 4)
	v.SetDefault("exec.keeper", true)
	v.SetDefault("exec.keeper_idle", 5*time.Minute)
	v.SetDefault("sandbox.mode", "namespaces")
	v.SetDefault("sandbox.fallback", false)
	v.SetDefault("sandbox.network", false)
	v.SetDefault("sandbox.binds", []string{})
	v.SetDefault("sandbox.tmp_size_mb", 1024)
	v.SetDefault("sandbox.memory_mb", 0)
	v.SetDefault("sandbox.pids", 0)
	v.SetDefault("sandbox.cpus", 0.0)
	v.SetDefault("sandbox.vaults", []map[string]any{})
	v.SetDefault("policy.rules", []map[string]any{})
	v.SetDefault("policy.fallback", "allow_with_checkpoint")
	v.SetDefault("approvals.ttl", time.Hour)
	v.SetDefault("checkpoints.auto_keep", 50)
	v.SetDefault("checkpoints.auto_max_age", 7*24*time.Hour)
	v.SetDefault("quota.mode", "logical")
	v.SetDefault("replication", "sync")
	v.SetDefault("fleet.heartbeat", time.Second)
	v.SetDefault("fleet.member_ttl", 5*time.Second)
	v.SetDefault("fleet.gc_interval", 24*time.Hour)
	v.SetDefault("telemetry.exporter", "") // none, unless OTEL_EXPORTER_OTLP_ENDPOINT is set
	v.SetDefault("telemetry.endpoint", "")
	v.SetDefault("telemetry.headers", map[string]string{})
	v.SetDefault("telemetry.insecure", false)
	v.SetDefault("telemetry.sample_ratio", 1.0)
	v.SetDefault("telemetry.service_name", "avfs")
	v.SetDefault("runtime.gc_percent", 25)
	v.SetDefault("mount.passthrough", true)
	v.SetDefault("mount.content_cache_mb", 4096)
	v.SetDefault("mount.wake_here", true)
	v.SetDefault("runtime.memory_limit_mb", 0)
}

// Load builds the configuration. flags may bind "home", "vault",
// "namespace", "nats" (nats.url) and "config"; file is an explicit config
// file ("" = $AVFS_CONFIG, else $home/avfs.yaml if present).
func Load(flags *pflag.FlagSet) (*Config, *viper.Viper, error) {
	v := viper.New()
	defaults(v)
	v.SetEnvPrefix("AVFS")
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.AutomaticEnv()
	if flags != nil {
		// An empty --home is a script's unset variable, not a wish for
		// the default home: acting on ~/.avfs instead would be a surprise.
		if f := flags.Lookup("home"); f != nil && f.Changed && f.Value.String() == "" {
			return nil, nil, fmt.Errorf("--home is empty: give a directory, or leave the flag out for %s", DefaultHome())
		}
		for key, flag := range map[string]string{"home": "home", "vault": "vault", "namespace": "namespace", "nats.url": "nats", "log_level": "log-level"} {
			if f := flags.Lookup(flag); f != nil {
				if err := v.BindPFlag(key, f); err != nil {
					return nil, nil, err
				}
			}
		}
	}
	file := os.Getenv("AVFS_CONFIG")
	if flags != nil {
		if f := flags.Lookup("config"); f != nil && f.Changed {
			file = f.Value.String()
		}
	}
	explicit := file != ""
	if !explicit {
		file = filepath.Join(v.GetString("home"), "avfs.yaml")
	}
	v.SetConfigFile(file)
	if err := v.ReadInConfig(); err != nil {
		var nf viper.ConfigFileNotFoundError
		if explicit || !(errors.As(err, &nf) || errors.Is(err, os.ErrNotExist)) {
			if _, statErr := os.Stat(file); explicit || statErr == nil {
				return nil, nil, fmt.Errorf("config %s: %w", file, err)
			}
		}
	}
	var c Config
	if err := v.Unmarshal(&c); err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	if c.Home == "" {
		c.Home = DefaultHome()
	}
	// A relative home (--home ./h) is resolved once, here: exec's mount
	// points, the sandbox's binds and the exec keeper (a process of its
	// own, started elsewhere) need paths that do not depend on the
	// working directory.
	home, err := filepath.Abs(c.Home)
	if err != nil {
		return nil, nil, fmt.Errorf("config: home %q: %w", c.Home, err)
	}
	c.Home = home
	v.Set("home", home)
	return &c, v, nil
}

// StorePath is the vault database under home.
func (c *Config) StorePath() string { return filepath.Join(c.Home, "store.db") }

// Show returns the effective settings as a flat sorted map with secrets
// masked.
func Show(v *viper.Viper) map[string]any {
	out := map[string]any{}
	keys := v.AllKeys()
	sort.Strings(keys)
	for _, k := range keys {
		val := v.Get(k)
		for _, s := range secretKeys {
			if k == s && fmt.Sprint(val) != "" {
				val = "***"
			}
		}
		// OTLP headers usually carry an auth token.
		if h, ok := val.(map[string]any); (ok && k == "telemetry.headers" && len(h) > 0) || strings.HasPrefix(k, "telemetry.headers.") {
			val = "***"
		}
		out[k] = val
	}
	out["config_file"] = v.ConfigFileUsed()
	return out
}
