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

// Version is set at build time with -ldflags "-X ...cli.Version=...".
var Version = "dev"

// app is one invocation's state.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	json           bool
	cfg            *config.Config
	viper          *viper.Viper
	client         Client
	clientMu       sync.Mutex // attempts run sends requests from many goroutines
	log            *slog.Logger
	// tracer is built from the config's telemetry section once it is
	// loaded (no-op by default); shutdown flushes it at exit.
	tracer   trace.TracerProvider
	shutdown func(context.Context) error
	// meter is set by the commands that serve metrics (--http); nil
	// records nothing.
	meter metric.MeterProvider
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

// Options tune the CLI.
type Options struct {
	Logger *slog.Logger // logs go to stderr; nil discards them
}

// Main runs the avfs command line and returns the exit status.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, o Options) int {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, log: o.Logger}
	// Decided before cobra parses anything, so that even usage errors
	// come out as JSON for programs.
	a.json = !isTerminal(stdout)
	for _, arg := range args {
		if arg == "--json" || arg == "--json=true" {
			a.json = true
		}
	}
	root := a.rootCmd()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if a.client != nil {
		a.client.Close()
	}
	if a.shutdown != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if serr := a.shutdown(sctx); serr != nil {
			a.log.Warn("flush traces", "err", serr)
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
		a.fail(re.err)
		return 1
	}
	var me *messages.Error
	if errors.As(err, &me) {
		a.fail(me)
		return 1
	}
	a.fail(&messages.Error{Code: messages.CodeInvalidArgument, Message: err.Error()})
	return 2
}

func (a *app) fail(e *messages.Error) {
	if a.json {
		json.NewEncoder(a.stdout).Encode(messages.ErrorDoc{Error: e})
		return
	}
	fmt.Fprintf(a.stderr, "avfs: %s: %s\n", e.Code, e.Message)
	if len(e.Details) > 0 {
		b, _ := json.Marshal(e.Details)
		fmt.Fprintf(a.stderr, "      details: %s\n", b)
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func (a *app) rootCmd() *cobra.Command {
	var jsonFlag bool
	root := &cobra.Command{
		Use:           "avfs",
		Short:         "Workspaces for AI agents: fork, checkpoint, mount and exec in SQLite vaults",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			a.json = a.json || jsonFlag
			cfg, v, err := config.Load(cmd.Flags())
			if err != nil {
				return err
			}
			a.cfg, a.viper = cfg, v
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
	pf := root.PersistentFlags()
	pf.BoolVar(&jsonFlag, "json", false, "print exactly one JSON document on stdout")
	pf.String("vault", "", "vault to act on (env AVFS_VAULT; default: the one chosen by `avfs vault use`)")
	pf.String("namespace", "", "namespace (env AVFS_NAMESPACE, default \"default\")")
	pf.String("home", "", "where local vaults, config and the embedded server's store live (env AVFS_HOME, default ~/.avfs)")
	pf.String("nats", "", "URL of a running fleet (env AVFS_NATS_URL)")
	pf.String("config", "", "config file (env AVFS_CONFIG, default $AVFS_HOME/avfs.yaml)")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return err })
	root.AddCommand(a.vaultCmd(), a.checkpointCmd(), a.quotaCmd(), a.auditCmd(), a.configCmd(), a.versionCmd(), a.gcCmd())
	for _, c := range a.fileCmds() {
		root.AddCommand(c)
	}
	root.AddCommand(a.demoCmd(), a.execCmd(), a.runCmd(), a.proxyCmd(), a.approvalCmd(), a.policyCmd())
	root.AddCommand(a.serveCmd(), a.workerCmd(), a.dispatcherCmd(), a.fleetCmd(), a.mountCmd(), a.unmountCmd(), a.attemptsCmd())
	return root
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
	c, err := openLocal(ctx, a.cfg, a.log, a.tracer, "local")
	if err != nil {
		return nil, err
	}
	a.client = c
	return c, nil
}

// do sends op and decodes the result into out (if non-nil); it returns
// the raw result for printing.
func (a *app) do(ctx context.Context, op messages.Op, vaultName string, args any, out any) (json.RawMessage, error) {
	c, err := a.connect(ctx)
	if err != nil {
		return nil, err
	}
	req := messages.Request{Op: op, Namespace: a.cfg.Namespace, Vault: vaultName, RequestID: client.NewRequestID(), Actor: a.actor()}
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
	rep, err := c.Do(ctx, req)
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

// emit prints a result: compact JSON in JSON mode, else for a person.
func (a *app) emit(v any) error {
	if a.json {
		if raw, ok := v.(json.RawMessage); ok {
			_, err := fmt.Fprintf(a.stdout, "%s\n", raw)
			return err
		}
		return json.NewEncoder(a.stdout).Encode(v)
	}
	return printHuman(a.stdout, v)
}

// progress writes a progress line to stderr (never stdout).
func (a *app) progress(format string, args ...any) {
	fmt.Fprintf(a.stderr, "\r"+format, args...)
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
