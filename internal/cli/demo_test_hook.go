package cli

import (
	"os"
	"os/exec"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/avfs/avfs/messages"
)

// demoTest runs `cargo test` on a copy of the vault's tree and reports
// whether it failed.
func (a *app) demoTest(cmd *cobra.Command, name string, say func(string, any)) (bool, error) {
	dir, err := os.MkdirTemp("", "avfs-demo-test-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(dir)
	var page messages.ReadTreeResult
	if _, err := a.do(cmd.Context(), messages.OpReadTree, name, messages.ReadTreeArgs{Path: "/"}, &page); err != nil {
		return false, err
	}
	for _, f := range page.Files {
		p := filepath.Join(dir, filepath.FromSlash(f.Path))
		if f.Type == "dir" {
			os.MkdirAll(p, 0o755)
			continue
		}
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, f.Content, 0o644); err != nil {
			return false, err
		}
	}
	c := exec.CommandContext(cmd.Context(), "cargo", "test", "--offline", "--quiet")
	c.Dir = dir
	out, err := c.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		return false, err
	}
	say("test: cargo test", map[string]any{"exit_code": code, "output_tail": tail(string(out), 600)})
	return code != 0, nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
