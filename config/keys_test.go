package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestEveryDefaultIsAKnownKey: every key that has a default is one
// Validate accepts, so a new setting never refuses its own default.
func TestEveryDefaultIsAKnownKey(t *testing.T) {
	t.Setenv("AVFS_HOME", t.TempDir())
	_, v, err := Load(pflag.NewFlagSet("x", pflag.ContinueOnError))
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(v); err != nil {
		t.Fatal(err)
	}
}

func TestValidateNamesTheNearestKey(t *testing.T) {
	home := t.TempDir()
	t.Setenv("AVFS_HOME", home)
	os.WriteFile(filepath.Join(home, "avfs.yaml"), []byte("exec:\n  timout: 10s\ntelemetry:\n  headers:\n    x-token: y\n"), 0o644)
	_, v, err := Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	err = Validate(v)
	if err == nil || !strings.Contains(err.Error(), `unknown key "exec.timout" (did you mean exec.timeout?)`) || strings.Contains(err.Error(), "headers") {
		t.Fatalf("Validate: %v", err)
	}
}
