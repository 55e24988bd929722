package cli

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/avfs/avfs/client"
	"github.com/avfs/avfs/messages"
)

func (a *app) demoCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "demo",
		Short: "Run the seed workflow step by step: snapshot, refactor, test, roll back on failure, report changes",
		Long: `demo creates a vault holding a small Rust crate, saves a checkpoint, applies a
refactor that breaks the build, runs the tests, rolls back to the checkpoint
when they fail, and reports what changed at each step. It runs against a
throw-away home unless --home or AVFS_HOME is set.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.runDemo(cmd) },
	}
}

// demoCrate is a tiny crate whose tests pass; demoRefactor breaks it.
var demoCrate = map[string]string{
	"/Cargo.toml": "[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
	"/src/lib.rs": "pub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n\n#[cfg(test)]\nmod tests {\n    use super::*;\n\n    #[test]\n    fn adds() {\n        assert_eq!(add(2, 2), 4);\n    }\n}\n",
}

const demoRefactor = "pub fn add(a: i32, b: i32) -> i32 {\n    // refactor: \"simplify\" the arithmetic\n    a * b + 1\n}\n\n#[cfg(test)]\nmod tests {\n    use super::*;\n\n    #[test]\n    fn adds() {\n        assert_eq!(add(2, 2), 4);\n    }\n}\n"

type demoStep struct {
	Step   string `json:"step"`
	Result any    `json:"result"`
}

func (a *app) runDemo(cmd *cobra.Command) error {
	if os.Getenv("AVFS_HOME") == "" && !cmd.Flags().Changed("home") {
		dir, err := os.MkdirTemp("", "avfs-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		a.cfg.Home = dir
	}
	ctx := cmd.Context()
	name := fmt.Sprintf("demo-%d", time.Now().Unix())
	where := "the fleet at " + a.cfg.NATS.URL
	if a.cfg.NATS.URL == "" && runningServe(a.cfg.Home) == "" {
		// The seed workflow runs against the embedded fleet: NATS with
		// JetStream, a dispatcher and a worker, all in this process.
		f, err := a.startFleet(ctx, "", "demo-"+newWorkerID())
		if err != nil {
			return err
		}
		defer f.stop()
		c, err := client.New(f.nc)
		if err != nil {
			return err
		}
		c.Tracer = a.tracer
		a.client = natsClient{c}
		where = "the embedded fleet at " + f.ns.ClientURL()
	}
	var steps []demoStep
	say := func(step string, res any) {
		steps = append(steps, demoStep{step, res})
		if !a.json {
			fmt.Fprintf(a.stdout, "\n== %s\n", step)
			printHuman(a.stdout, res)
		}
	}
	if !a.json {
		fmt.Fprintf(a.stdout, "avfs demo: vault %s on %s (home %s)\n", name, where, a.cfg.Home)
	}

	var vr messages.VaultResult
	if _, err := a.do(ctx, messages.OpVaultCreate, name, messages.VaultCreateArgs{}, &vr); err != nil {
		return err
	}
	say("create a vault", &vr)

	batch := messages.WriteBatchArgs{}
	for p, c := range demoCrate {
		batch.Files = append(batch.Files, messages.BatchFile{Path: p, Type: "file", Content: []byte(c)})
	}
	var br messages.BatchResult
	if _, err := a.do(ctx, messages.OpWriteBatch, name, batch, &br); err != nil {
		return err
	}
	say("import a Rust crate", &br)

	var cr messages.CheckpointResult
	if _, err := a.do(ctx, messages.OpCheckpointSave, name, messages.CheckpointArgs{Name: "before-refactor", Message: "tests pass"}, &cr); err != nil {
		return err
	}
	say("snapshot: checkpoint before-refactor", &cr)

	var wr messages.WriteResult
	if _, err := a.do(ctx, messages.OpWrite, name, messages.WriteArgs{Path: "/src/lib.rs", Content: []byte(demoRefactor)}, &wr); err != nil {
		return err
	}
	if _, err := a.do(ctx, messages.OpWrite, name, messages.WriteArgs{Path: "/NOTES.md", Content: []byte("refactor notes\n")}, &wr); err != nil {
		return err
	}
	var dr messages.DiffResult
	if _, err := a.do(ctx, messages.OpCheckpointDiff, name, messages.DiffArgs{From: "before-refactor"}, &dr); err != nil {
		return err
	}
	say("refactor: what changed since the checkpoint", &dr)

	failed, err := a.demoTest(cmd, name, say)
	if err != nil {
		return err
	}
	if failed {
		var rr messages.RestoreResult
		if _, err := a.do(ctx, messages.OpCheckpointRestore, name, messages.CheckpointArgs{Name: "before-refactor"}, &rr); err != nil {
			return err
		}
		say("tests failed: roll back to before-refactor", &rr)
		if _, err := a.demoTest(cmd, name, say); err != nil {
			return err
		}
	}

	var fr messages.ForkResult
	if _, err := a.do(ctx, messages.OpVaultFork, name, messages.VaultForkArgs{Target: name + "-attempt-2"}, &fr); err != nil {
		return err
	}
	say("fork the restored vault for another attempt", &fr)

	var cat messages.CatResult
	if _, err := a.do(ctx, messages.OpCat, name+"-attempt-2", messages.PathArgs{Path: "/src/lib.rs"}, &cat); err != nil {
		return err
	}
	say("the fork holds the passing code", &cat)

	var ar messages.AuditResult
	if _, err := a.do(ctx, messages.OpAudit, name, messages.AuditArgs{Limit: 1000}, &ar); err != nil {
		return err
	}
	// The file-level events of the builds are many; show the workflow's.
	kept := ar.Events[:0]
	for _, e := range ar.Events {
		if strings.HasPrefix(e.Action, "exec.") || strings.HasPrefix(e.Action, "checkpoint.") || strings.HasPrefix(e.Action, "vault.") {
			kept = append(kept, e)
		}
	}
	ar.Events = kept
	say("audit log (workflow events)", &ar)
	if a.json {
		return a.emit(map[string]any{"vault": name, "fleet": where, "steps": steps})
	}
	return nil
}

// demoTest runs `cargo test` in the vault through exec and reports
// whether it failed.
func (a *app) demoTest(cmd *cobra.Command, name string, say func(string, any)) (bool, error) {
	var env messages.Envelope
	if _, err := a.do(cmd.Context(), messages.OpExec, name, messages.ExecArgs{Argv: []string{"cargo", "test", "--offline", "--quiet"}, Timeout: "300s"}, &env); err != nil {
		return false, err
	}
	if len(env.Stdout) > 600 {
		env.Stdout = "..." + env.Stdout[len(env.Stdout)-600:]
	}
	say("test: avfs exec -- cargo test", map[string]any{"status": env.Status, "exit_code": env.ExitCode, "checkpoint": env.Checkpoint,
		"decision": env.Decision.Action, "duration_ms": env.DurationMS, "stdout_tail": env.Stdout,
		"changes": map[string]int{"added": len(env.Changes.Added), "modified": len(env.Changes.Modified), "deleted": len(env.Changes.Deleted)}})
	return env.Status != messages.StatusCompleted || env.ExitCode == nil || *env.ExitCode != 0, nil
}
