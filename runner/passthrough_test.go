package runner

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/avfs/avfs/internal/poll"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/mount/tree"
	"github.com/avfs/avfs/policy"
)

// Exec's mounts read large files through the content cache (FUSE
// passthrough), and a command that writes a file it is also reading gets
// what a local disk gives: the reader sees the write, and the vault gets
// it.
func TestExecMountsUsePassthrough(t *testing.T) {
	b, err := tree.OpenBacking(t.TempDir(), 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	f := newBackedFixture(t, Config{Sandbox: SandboxConfig{KeepInits: true}}, policy.Default(), b)
	f.do(messages.OpVaultCreate, "v", messages.VaultCreateArgs{}, nil)
	big := strings.Repeat("0123456789abcdef", (2<<20)/16)
	f.write("v", "/big", big)

	env := f.exec("v", messages.ExecArgs{Shell: "wc -c < big", Checkpoint: "never"})
	if got := strings.TrimSpace(env.Stdout); got != "2097152" || *env.ExitCode != 0 {
		t.Fatalf("wc -c < big: %q (exit %d, stderr %q), want 2097152", got, *env.ExitCode, env.Stderr)
	}
	poll.Until(t, 5*time.Second, "the content cache holding the big file", func() (bool, error) {
		return b.Bytes() == int64(len(big)), nil
	})

	// Held open for reading (fd 3), appended to, read again through the
	// held descriptor.
	env = f.exec("v", messages.ExecArgs{Shell: "exec 3<big; echo tail >> big; wc -c <&3", Checkpoint: "never"})
	if got := strings.TrimSpace(env.Stdout); got != "2097157" || *env.ExitCode != 0 {
		t.Fatalf("append beside a reader: %q (exit %d, stderr %q), want 2097157", got, *env.ExitCode, env.Stderr)
	}
	data, _, err := f.st.Vault("default", "v").ReadFile(context.Background(), "/big")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(data); got != big+"tail\n" {
		t.Fatalf("vault after the append: %d bytes ending %q, want %d ending \"tail\\n\"", len(got), got[max(0, len(got)-8):], len(big)+5)
	}
}
