package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

// TestLogLevel: log_level decides what the logs on stderr show, from
// --log-level, AVFS_LOG_LEVEL or the config file; a bad value is a usage
// error naming the valid ones, and changes nothing.
func TestLogLevel(t *testing.T) {
	e := newEnv(t)
	run := func(args ...string) (slog.Level, string, int) {
		t.Helper()
		lv := new(slog.LevelVar)
		lv.Set(slog.LevelWarn)
		var out, errb bytes.Buffer
		log := slog.New(slog.NewTextHandler(&errb, &slog.HandlerOptions{Level: lv}))
		code := Main(context.Background(), args, strings.NewReader(""), &out, &errb, Options{Logger: log, Level: lv})
		return lv.Level(), out.String(), code
	}
	if got, _, code := run("vault", "list"); code != 0 || got != slog.LevelWarn {
		t.Fatalf("default: level %v exit %d, want %v exit 0", got, code, slog.LevelWarn)
	}
	if got, _, code := run("--log-level", "debug", "vault", "list"); code != 0 || got != slog.LevelDebug {
		t.Fatalf("--log-level debug: level %v exit %d, want %v exit 0", got, code, slog.LevelDebug)
	}
	t.Setenv("AVFS_LOG_LEVEL", "INFO")
	if got, _, code := run("vault", "list"); code != 0 || got != slog.LevelInfo {
		t.Fatalf("AVFS_LOG_LEVEL=INFO: level %v exit %d, want %v exit 0", got, code, slog.LevelInfo)
	}
	if got, _, code := run("--log-level", "error", "vault", "list"); code != 0 || got != slog.LevelError {
		t.Fatalf("--log-level over AVFS_LOG_LEVEL: level %v exit %d, want %v exit 0", got, code, slog.LevelError)
	}
	for _, bad := range [][]string{{"--log-level", "loud", "vault", "create", "x"}, {"vault", "create", "x"}} {
		if bad[0] != "--log-level" {
			t.Setenv("AVFS_LOG_LEVEL", "verbose")
		}
		_, out, code := run(bad...)
		var doc struct {
			Error struct{ Code, Message string }
		}
		if code != 2 || json.Unmarshal([]byte(out), &doc) != nil || doc.Error.Code != "INVALID_ARGUMENT" ||
			!strings.Contains(doc.Error.Message, "debug, info, warn, error") {
			t.Fatalf("avfs %v: exit %d\n%s\nwant exit 2, INVALID_ARGUMENT naming debug, info, warn, error", bad, code, out)
		}
	}
	t.Setenv("AVFS_LOG_LEVEL", "")
	if n := len(e.ok("vault", "list")["vaults"].([]any)); n != 0 {
		t.Fatalf("a refused command created %d vaults", n)
	}
}
