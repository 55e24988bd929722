package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/avfs/avfs/client"
	"github.com/avfs/avfs/config"
	"github.com/avfs/avfs/handler"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/telemetry"
)

// app is one invocation's state.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	// format is the --output format; json is format == outJSON, kept
	// because most commands only ask "JSON or not".
	format   string
	json     bool
	quiet    bool
	cfg      *config.Config
	viper    *viper.Viper
	client   Client
	clientMu sync.Mutex // attempts run sends requests from many goroutines
	log      *slog.Logger
	level    *slog.LevelVar // the level of log's handler, nil when fixed
	// tracer is built from the config's telemetry section once it is
	// loaded (no-op by default); shutdown flushes it at exit.
	tracer   trace.TracerProvider
	shutdown func(context.Context) error
	// meter is set by the commands that serve metrics (--http); nil
	// records nothing.
	meter metric.MeterProvider
	// lastVault is the vault of the last request, for error hints.
	lastVault string
	// requestID is --request-id (or AVFS_REQUEST_ID), "" for a fresh id
	// per request; mutations counts the mutating requests sent under it
	// (requestIDFor).
	requestID string
	mutations int
}

// requestError is a failed request (exit status 1), as opposed to a usage
// error (exit status 2).
type requestError struct{ err *messages.Error }

func (e *requestError) Error() string { return e.err.Error() }

// Unwrap exposes the wire error to errors.As.
func (e *requestError) Unwrap() error { return e.err }

// exitError carries a command's own exit status (exec).
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// usageError is a command line avfs cannot act on (exit status 2); hint,
// if set, replaces the generic "see --help".
type usageError struct{ msg, hint string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{msg: fmt.Sprintf(format, args...)} }

// Options tune the CLI.
type Options struct {
	Logger *slog.Logger // logs go to stderr; nil discards them
	// Level, when set, is the level of Logger's handler: the CLI sets it
	// from log_level (--log-level, AVFS_LOG_LEVEL, the config file) once
	// the configuration is read.
	Level *slog.LevelVar
}

// Main runs the avfs command line and returns the exit status.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, o Options) int {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, log: o.Logger, level: o.Level}
	// Decided before cobra parses anything, so that even usage errors
	// come out as JSON for programs; PersistentPreRunE decides again
	// from the parsed flags.
	a.setFormat(formatFromArgs(args, isTerminal(stdout)))
	root := a.rootCmd()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if a.client != nil {
		a.client.Close()
	}
	if a.shutdown != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if serr := a.shutdown(sctx); serr != nil {
			a.log.Warn("flush traces", telemetry.LogKeyErr, serr)
		}
		cancel()
	}
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	var re *requestError
	if errors.As(err, &re) {
		a.fail(cmd, re.err, "")
		return requestFailed(cmd)
	}
	var ue *usageError
	var me *messages.Error
	if !errors.As(err, &ue) && errors.As(err, &me) {
		a.fail(cmd, me, "")
		return requestFailed(cmd)
	}
	hint := usageHint(cmd, err.Error())
	if ue != nil && ue.hint != "" {
		hint = ue.hint
	}
	a.fail(cmd, &messages.Error{Code: messages.CodeInvalidArgument, Message: err.Error()}, hint)
	return 2
}

// requestFailed is the exit status of a failed request: 1, but 125 for
// exec, whose own 1 is the command's (docs/cli.md, as docker run has it).
func requestFailed(cmd *cobra.Command) int {
	if cmd != nil && cmd.Name() == "exec" {
		return 125
	}
	return 1
}

// document reports whether results print as a document (JSON or YAML)
// rather than for a person.
func (a *app) document() bool { return a.format == outJSON || a.format == outYAML }

// setFormat sets the output format and what follows from it.
func (a *app) setFormat(f string) {
	a.format = f
	a.json = f == outJSON
}

// formatFromArgs is the output format the raw arguments ask for, before
// cobra has parsed them: --output/-o, else --json[=BOOL], else JSON when
// stdout is not a terminal. An unknown format is left to the flag check.
func formatFromArgs(args []string, tty bool) string {
	f := outTable
	if !tty {
		f = outJSON
	}
	outSet := false // --output wins over --json
	for i, arg := range args {
		if arg == "--" {
			break
		}
		switch {
		case arg == "--json" || arg == "--json=true":
			if !outSet {
				f = outJSON
			}
		case arg == "--json=false":
			if !outSet {
				f = outTable
			}
		case (arg == "-o" || arg == "--output") && i+1 < len(args):
			if slices.Contains(outputFormats, args[i+1]) {
				f, outSet = args[i+1], true
			}
		case strings.HasPrefix(arg, "--output=") || strings.HasPrefix(arg, "-o="):
			if v := arg[strings.Index(arg, "=")+1:]; slices.Contains(outputFormats, v) {
				f, outSet = v, true
			}
		}
	}
	return f
}

// fail prints a failed command: its error document in JSON mode, else a
// line for a person with the next command to try.
func (a *app) fail(cmd *cobra.Command, e *messages.Error, hint string) {
	if hint == "" {
		hint = a.hint(cmd, e)
	}
	if a.document() {
		doc := map[string]any{"error": errorWithHint{e, hint}}
		if a.format == outYAML {
			b, _ := json.Marshal(doc)
			writeYAML(a.stdout, b)
			return
		}
		json.NewEncoder(a.stdout).Encode(doc)
		return
	}
	fmt.Fprintf(a.stderr, "avfs: %s\n", strings.TrimSpace(e.Message))
	if hint != "" {
		fmt.Fprintf(a.stderr, "hint: %s\n", hint)
	}
	if a.format == outWide || len(e.Details) > 0 && e.Code == messages.CodeQuotaExceeded {
		b, _ := json.Marshal(e.Details)
		fmt.Fprintf(a.stderr, "(%s %s)\n", e.Code, b)
	}
}

// errorWithHint is the error document of the CLI: the wire error and,
// when avfs knows one, the next command to run.
type errorWithHint struct {
	*messages.Error
	Hint string `json:"hint,omitempty"`
}

func (a *app) rootCmd() *cobra.Command {
	var jsonFlag bool
	var output string
	root := &cobra.Command{
		Use:   "avfs",
		Short: "Workspaces for AI agents: fork, checkpoint, mount and exec in SQLite vaults",
		Long: `avfs keeps workspaces for AI agents in SQLite vaults: fork them in
milliseconds, checkpoint and restore by name, mount one as a real directory,
and run policy-checked commands in it that report every file they changed.

On a terminal avfs prints tables; when stdout is not a terminal (or with
--json) it prints exactly one JSON document. Exit status: 0 success, 1 a
request failed, 2 a usage error; exec exits with the command's own status.`,
		Version:       versionString(),
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Name() == cobra.ShellCompRequestCmd || cmd.Name() == cobra.ShellCompNoDescRequestCmd {
				// Completion loads the config itself and stays silent
				// when it is broken: an error would become a candidate.
				return nil
			}
			if err := a.formatFromFlags(cmd, jsonFlag, output); err != nil {
				return err
			}
			a.quiet, _ = cmd.Flags().GetBool("quiet")
			if err := a.setRequestID(cmd); err != nil {
				return err
			}
			cfg, v, err := config.Load(cmd.Flags())
			if err != nil {
				return err
			}
			a.cfg, a.viper = cfg, v
			if err := a.checkConfig(); err != nil {
				return err
			}
			if a.level != nil {
				l, _ := logLevel(cfg.LogLevel) // checked by checkConfig
				a.level.Set(l)
			}
			if w := config.HomeExposed(cfg.Home); w != "" {
				fmt.Fprintln(a.stderr, "avfs: warning:", w)
			}
			t := cfg.Telemetry
			a.tracer, a.shutdown, err = telemetry.Setup(cmd.Context(), telemetry.Config{
				Exporter: t.Exporter, Endpoint: t.Endpoint, Headers: t.Headers, Insecure: t.Insecure,
				SampleRatio: t.SampleRatio, ServiceName: t.ServiceName,
			})
			return err
		},
	}
	root.SetVersionTemplate("avfs {{.Version}}\n")
	pf := root.PersistentFlags()
	pf.BoolVar(&jsonFlag, "json", false, "print exactly one JSON document on stdout (--json=false: for a person, even into a pipe)")
	pf.StringVarP(&output, "output", "o", "", "output format: json, yaml, table or wide (default: table on a terminal, else json)")
	pf.BoolP("quiet", "q", false, "no progress on stderr")
	pf.String("vault", "", "vault to act on (env AVFS_VAULT; default: the one chosen by 'avfs vault use')")
	pf.String("namespace", "", "namespace (env AVFS_NAMESPACE, default \"default\")")
	pf.String("home", "", "where local vaults, config and the embedded server's store live (env AVFS_HOME, default ~/.avfs)")
	pf.String("nats", "", "URL of a running fleet (env AVFS_NATS_URL)")
	pf.String("config", "", "config file (env AVFS_CONFIG, default $AVFS_HOME/avfs.yaml)")
	pf.String("log-level", "", "what the logs on stderr show: debug, info, warn or error (env AVFS_LOG_LEVEL, default warn)")
	pf.String("request-id", "", "idempotency key of this command's changes: the same command run again with the same id is answered from the stored result, not applied again (env AVFS_REQUEST_ID)")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{msg: err.Error()} })
	root.AddCommand(a.vaultCmd(), a.checkpointCmd(), a.quotaCmd(), a.auditCmd(), a.configCmd(), a.versionCmd(), a.gcCmd())
	for _, c := range a.fileCmds() {
		root.AddCommand(c)
	}
	root.AddCommand(a.historyCmds()...)
	root.AddCommand(a.searchCmds()...)
	root.AddCommand(a.labelCmds()...)
	root.AddCommand(a.snapshotCmd())
	root.AddCommand(a.maintCmds()...)
	root.AddCommand(a.demoCmd(), a.execCmd(), a.runCmd(), a.proxyCmd(), a.approvalCmd(), a.policyCmd())
	root.AddCommand(a.serveCmd(), a.workerCmd(), a.dispatcherCmd(), a.fleetCmd(), a.mountCmd(), a.unmountCmd(), a.attemptsCmd(), a.keeperCmd())
	// Made now rather than at Execute, so that finishTree reaches them.
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	a.finishTree(root)
	return root
}

// formatFromFlags decides the output format from the parsed flags:
// --output if given, else --json (true or false), else JSON unless stdout
// is a terminal.
func (a *app) formatFromFlags(cmd *cobra.Command, jsonFlag bool, output string) error {
	f := cmd.Flags()
	switch {
	case f.Changed("output"):
		if !slices.Contains(outputFormats, output) {
			return usagef("--output %q: want one of %s", output, strings.Join(outputFormats, ", "))
		}
		a.setFormat(output)
	case f.Changed("json"):
		if jsonFlag {
			a.setFormat(outJSON)
		} else {
			a.setFormat(outTable)
		}
	}
	return nil
}

// connect opens the client once per invocation.
func (a *app) connect(ctx context.Context) (Client, error) {
	a.clientMu.Lock()
	defer a.clientMu.Unlock()
	if a.client != nil {
		return a.client, nil
	}
	url := a.cfg.NATS.URL
	if url == "" {
		url = runningServe(a.cfg.Home)
	}
	if url != "" {
		nc, err := connectNATS(a.cfg, url, "avfs-cli")
		if err != nil {
			return nil, err
		}
		c, err := client.New(nc)
		if err != nil {
			nc.Close()
			return nil, messages.Errorf(messages.CodeUnavailable, "%v", err)
		}
		c.Tracer = a.tracer
		a.client = natsClient{c}
		return a.client, nil
	}
	c, err := openLocal(ctx, a.cfg, a.log, a.tracer, "local", false)
	if err != nil {
		return nil, err
	}
	a.client = c
	return c, nil
}

// do sends op and decodes the result into out (if non-nil); it returns
// the raw result for printing.
func (a *app) do(ctx context.Context, op messages.Op, vaultName string, args any, out any) (json.RawMessage, error) {
	req := messages.Request{Op: op, Namespace: a.cfg.Namespace, Vault: vaultName, RequestID: a.requestIDFor(op), Actor: a.actor()}
	a.lastVault = vaultName
	if args != nil {
		if s, bad := messages.InvalidString(args); bad {
			return nil, &requestError{messages.ErrNotUTF8(s)}
		}
		b, err := json.Marshal(args)
		if err != nil {
			return nil, err
		}
		req.Args = b
	}
	rep, err := a.send(ctx, req)
	if err != nil {
		return nil, &requestError{handler.ToError(err)}
	}
	if rep.Error != nil {
		return nil, &requestError{rep.Error}
	}
	if out != nil {
		if err := json.Unmarshal(rep.Result, out); err != nil {
			return nil, fmt.Errorf("decode %s result: %w", op, err)
		}
	}
	return rep.Result, nil
}

// send sends req: a local exec (or approval grant, which runs one) to the
// home's exec keeper when one may serve it (keeper.go), everything else
// through the invocation's client.
func (a *app) send(ctx context.Context, req messages.Request) (messages.Reply, error) {
	// A granted approval runs its command: there too, so that it uses the
	// kept mount rather than a second one at the same place.
	if (req.Op == messages.OpExec || req.Op == messages.OpApprovalGrant) && a.useKeeper() {
		rep, err := a.keeperExec(ctx, req)
		if !errors.Is(err, errKeeperUnavailable) || ctx.Err() != nil {
			return rep, err // interrupted while waiting for a keeper: run nothing
		}
		a.log.Warn("running the command in this process", telemetry.LogKeyErr, err)
	}
	c, err := a.connect(ctx)
	if err != nil {
		return messages.Reply{}, err
	}
	rep, err := c.Do(ctx, req)
	if _, local := c.(*localClient); local && err == nil && rep.Error == nil && req.Op == messages.OpVaultDelete {
		// The exec keeper may hold the deleted vault's mount.
		keeperForget(a.cfg.Home, req.Namespace, req.Vault)
	}
	return rep, err
}

// useKeeper says whether this invocation's execs go to the exec keeper:
// local mode (no fleet URL, no avfs serve on the home), exec.keeper on,
// and no client opened yet (a command that already opened the store in
// this process keeps using it).
func (a *app) useKeeper() bool {
	a.clientMu.Lock()
	defer a.clientMu.Unlock()
	return a.client == nil && a.cfg.Exec.Keeper && a.cfg.NATS.URL == "" && runningServe(a.cfg.Home) == ""
}

func (a *app) actor() string {
	if a.cfg.Actor != "" {
		return a.cfg.Actor
	}
	if u := os.Getenv("USER"); u != "" {
		return "cli:" + u
	}
	return "cli"
}

// currentVault is --vault, AVFS_VAULT, or the `vault use` choice.
func (a *app) currentVault() (string, error) {
	if a.cfg.Vault != "" {
		return a.cfg.Vault, nil
	}
	b, err := os.ReadFile(a.usePath())
	if err == nil {
		var m map[string]string
		if json.Unmarshal(b, &m) == nil && m[a.cfg.Namespace] != "" {
			return m[a.cfg.Namespace], nil
		}
	}
	return "", messages.Errorf(messages.CodeInvalidArgument, "no vault chosen: pass --vault NAME, set AVFS_VAULT, or run `avfs vault use NAME`")
}

func (a *app) usePath() string { return filepath.Join(a.cfg.Home, "current-vault.json") }

func (a *app) setCurrentVault(name string) error {
	m := map[string]string{}
	if b, err := os.ReadFile(a.usePath()); err == nil {
		json.Unmarshal(b, &m)
	}
	m[a.cfg.Namespace] = name
	b, _ := json.MarshalIndent(m, "", "  ")
	return config.WriteFile(a.usePath(), b)
}

func trimSlash(p string) string {
	if p == "" {
		return "/"
	}
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	return p
}
