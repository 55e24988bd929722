package runner

import (
	"context"
	"encoding/json"
	osexec "os/exec"
	"strconv"
	"testing"

	"github.com/avfs/avfs/messages"
)

// BenchmarkExecTrue is DESIGN.md §7's exec overhead: `true` in an
// already-mounted vault through the whole pipeline (policy, snapshot,
// run, sync, change summary, envelope, audit), in-process. Compare it
// with BenchmarkOSExecTrue from the same run.
// The sandbox's init is kept between commands, as in a worker.
func BenchmarkExecTrue(b *testing.B) { benchExecTrue(b, newFixture(b, Config{})) }

// BenchmarkExecTrueOneShotInit is BenchmarkExecTrue with an init started
// for every command, as the CLI without a server does.
func BenchmarkExecTrueOneShotInit(b *testing.B) { benchExecTrue(b, newOneShotFixture(b, Config{})) }

// BenchmarkExecTrueUnsandboxed is BenchmarkExecTrue with sandbox mode
// none: the difference is the sandbox's cost (BENCHMARKS.md, "Sandbox").
func BenchmarkExecTrueUnsandboxed(b *testing.B) {
	benchExecTrue(b, newFixture(b, Config{Sandbox: SandboxConfig{Mode: messages.SandboxNone}}))
}

func benchExecTrue(b *testing.B, f *fixture) {
	f.do(messages.OpVaultCreate, "bench", messages.VaultCreateArgs{}, nil)
	args, _ := json.Marshal(messages.ExecArgs{Argv: []string{"true"}, Checkpoint: "never"})
	run := func(i int) {
		rep := f.h.Handle(context.Background(), messages.Request{Op: messages.OpExec, Namespace: "default", Vault: "bench",
			RequestID: "bench-" + strconv.Itoa(i), Args: args})
		if rep.Error != nil {
			b.Fatal(rep.Error)
		}
	}
	run(-1) // mounts the vault: the benchmark measures an active vault
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		run(i)
	}
}

// BenchmarkOSExecTrue is the baseline: a bare os/exec of `true`.
func BenchmarkOSExecTrue(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if err := osexec.Command("true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}
