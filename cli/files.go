package cli

import (
	"context"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/avfs/avfs/client"
	"github.com/avfs/avfs/config"
	"github.com/avfs/avfs/handler"
	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/vault"
)

func toErr(err error) *messages.Error { return handler.ToError(err) }

func configShow(a *app) map[string]any { return config.Display(a.viper) }

// vaultCmdE wraps a command body that acts on the current vault.
func (a *app) vaultCmdE(fn func(cmd *cobra.Command, v string, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		v, err := a.currentVault()
		if err != nil {
			return err
		}
		return fn(cmd, v, args)
	}
}

func (a *app) fileCmds() []*cobra.Command {
	var w messages.WriteArgs
	write := &cobra.Command{
		Use: "write PATH [CONTENT]", Short: "Write a file (stdin when CONTENT is omitted)", Args: cobra.RangeArgs(1, 2),
		RunE: a.vaultCmdE(func(cmd *cobra.Command, v string, args []string) error {
			args2 := w
			args2.Path = args[0]
			if len(args) == 2 {
				args2.Content = []byte(args[1])
				return call[messages.WriteResult](a, cmd, messages.OpWrite, v, args2)
			}
			return a.writeFrom(cmd, v, args2, a.stdin)
		}),
	}
	write.Flags().BoolVar(&w.Append, "append", false, "append instead of replacing")
	write.Flags().StringVar(&w.Mode, "mode", "", "permission bits, octal (default 0644 for a new file)")
	write.Flags().BoolVarP(&w.Parents, "parents", "p", false, "create missing parent directories")

	var raw bool
	var catVersion int64
	cat := &cobra.Command{
		Use: "cat PATH [-v N]", Short: "Print a file's bytes, or one of its versions (with --json: a document with its content)", Args: cobra.ExactArgs(1),
		Long: `cat writes the file's bytes to stdout, so that avfs cat /f > f copies it, and
errors go to stderr as text. Only --json (or --output json|yaml) prints the
document {"path", "size", "content"} (content_base64 for a file that is not
UTF-8) and errors as JSON; --raw writes the bytes even then. On a terminal,
a binary file is not written unless --raw is given. -v N does the same with
version N of the file (see avfs log).`,
		RunE: a.vaultCmdE(func(cmd *cobra.Command, v string, args []string) error {
			if catVersion != 0 {
				document := !raw && a.asked(cmd, outJSON, outYAML)
				if !document {
					a.setFormat(outTable) // errors for a person, on stderr
				}
				var out messages.HistoryCatResult
				body, err := a.do(cmd.Context(), messages.OpHistoryCat, v, messages.HistoryVersionArgs{Path: args[0], Version: catVersion}, &out)
				if err != nil {
					return err
				}
				if document {
					return a.show(body, &out.CatResult)
				}
				return a.writeContent(out.CatResult, args[0], raw)
			}
			fc, err := a.fleet(cmd.Context())
			if err != nil {
				return err
			}
			if !raw && a.asked(cmd, outJSON, outYAML) {
				if fc != nil {
					return a.catFleet(cmd, fc, v, args[0])
				}
				return call[messages.CatResult](a, cmd, messages.OpCat, v, messages.CatArgs{Path: args[0]})
			}
			a.setFormat(outTable) // errors for a person, on stderr
			return a.catRaw(cmd, fc, v, args[0], raw)
		}),
	}
	cat.Flags().BoolVar(&raw, "raw", false, "write the bytes, even with --json or to a terminal")
	cat.Flags().Int64VarP(&catVersion, "version", "v", 0, "print version N of the file (see avfs log)")
	var ls messages.LsArgs
	var long bool
	lsCmd := &cobra.Command{
		Use: "ls [PATH]", Short: "List a directory", Args: cobra.MaximumNArgs(1),
		RunE: a.vaultCmdE(func(cmd *cobra.Command, v string, args []string) error {
			l := ls
			l.Path = "/"
			if len(args) == 1 {
				l.Path = args[0]
			}
			var out messages.LsResult
			raw, err := a.do(cmd.Context(), messages.OpLs, v, l, &out)
			if err != nil {
				return err
			}
			if !a.document() && !long {
				w := controlEscaper{a.stdout}
				for _, e := range out.Entries {
					name := e.Path
					if !l.Recursive {
						name = e.Name
					}
					if strings.ContainsAny(name, "\t\n") {
						name = strconv.Quote(name) // one line per entry
					}
					if e.Type == "dir" {
						name += "/"
					}
					fmt.Fprintln(w, name)
				}
				return nil
			}
			return a.show(raw, &out)
		}),
	}
	lsCmd.Flags().BoolVarP(&long, "long", "l", false, "type, mode, size and time of each entry")
	lsCmd.Flags().BoolVarP(&ls.Recursive, "recursive", "R", false, "list subdirectories too")

	stat := &cobra.Command{
		Use: "stat PATH", Short: "Describe an entry", Args: cobra.ExactArgs(1),
		RunE: a.vaultCmdE(func(cmd *cobra.Command, v string, args []string) error {
			return call[messages.Entry](a, cmd, messages.OpStat, v, messages.PathArgs{Path: args[0]})
		}),
	}
	var mk messages.MkdirArgs
	mkdir := &cobra.Command{
		Use: "mkdir PATH", Short: "Create a directory", Args: cobra.ExactArgs(1),
		RunE: a.vaultCmdE(func(cmd *cobra.Command, v string, args []string) error {
			m := mk
			m.Path = args[0]
			return call[messages.PathResult](a, cmd, messages.OpMkdir, v, m)
		}),
	}
	mkdir.Flags().BoolVarP(&mk.Parents, "parents", "p", false, "create parents; an existing directory is fine")
	var rmArgs messages.RmArgs
	rm := &cobra.Command{
		Use: "rm PATH", Short: "Remove an entry", Args: cobra.ExactArgs(1),
		RunE: a.vaultCmdE(func(cmd *cobra.Command, v string, args []string) error {
			r := rmArgs
			r.Path = args[0]
			return call[messages.PathResult](a, cmd, messages.OpRm, v, r)
		}),
	}
	rm.Flags().BoolVarP(&rmArgs.Recursive, "recursive", "r", false, "remove a directory and its contents")
	rm.Flags().BoolVarP(&rmArgs.Force, "force", "f", false, "a missing path is not an error")
	mv := &cobra.Command{
		Use: "mv SRC DST", Short: "Move or rename", Args: cobra.ExactArgs(2),
		RunE: a.vaultCmdE(func(cmd *cobra.Command, v string, args []string) error {
			return call[messages.PathResult](a, cmd, messages.OpMv, v, messages.MoveArgs{Src: args[0], Dst: args[1]})
		}),
	}
	var cpRec bool
	cp := &cobra.Command{
		Use: "cp SRC DST", Short: "Copy (content is shared, not duplicated)", Args: cobra.ExactArgs(2),
		RunE: a.vaultCmdE(func(cmd *cobra.Command, v string, args []string) error {
			return call[messages.PathResult](a, cmd, messages.OpCp, v, messages.MoveArgs{Src: args[0], Dst: args[1], Recursive: cpRec})
		}),
	}
	cp.Flags().BoolVarP(&cpRec, "recursive", "r", false, "copy directories")
	ln := &cobra.Command{
		Use: "ln SRC DST", Short: "Make DST another name of SRC (a hard link)", Args: cobra.ExactArgs(2),
		RunE: a.vaultCmdE(func(cmd *cobra.Command, v string, args []string) error {
			return call[messages.PathResult](a, cmd, messages.OpLn, v, messages.MoveArgs{Src: args[0], Dst: args[1]})
		}),
	}

	imp := &cobra.Command{
		Use: "import HOSTDIR [VAULTDIR]", Short: "Copy a host directory tree into the vault", Args: cobra.RangeArgs(1, 2),
		RunE: a.vaultCmdE(func(cmd *cobra.Command, v string, args []string) error {
			dst := "/"
			if len(args) == 2 {
				dst = trimSlash(args[1])
			}
			return a.importTree(cmd, v, args[0], dst)
		}),
	}
	exp := &cobra.Command{
		Use: "export VAULTDIR HOSTDIR", Short: "Copy a vault tree out to a host directory", Args: cobra.ExactArgs(2),
		RunE: a.vaultCmdE(func(cmd *cobra.Command, v string, args []string) error {
			return a.exportTree(cmd, v, trimSlash(args[0]), args[1])
		}),
	}
	return []*cobra.Command{write, cat, lsCmd, stat, mkdir, rm, mv, cp, ln, imp, exp}
}

// Import batches: many files per request and transaction, bounded so a
// batch fits a NATS message.
const (
	batchBytes = 4 << 20
	batchFiles = 2000
)

// hostDirOp runs a whole-tree import or export in one request when the
// CLI serves requests in-process. It reports false through a fleet, where
// no request names a path of the worker's machine.
func (a *app) hostDirOp(cmd *cobra.Command, op messages.Op, v, hostDir, vaultPath string) (bool, error) {
	if fc, err := a.fleet(cmd.Context()); err != nil || fc != nil {
		return err != nil, err
	}
	abs, err := filepath.Abs(hostDir)
	if err != nil {
		return true, err
	}
	// One request in-process: the display shows the totals when it ends.
	verb, files, bytes := "export", int64(0), int64(0)
	if op == messages.OpImportDir {
		verb = "import"
		files, bytes = hostTotals(abs)
	}
	var r messages.BatchResult
	if _, err := a.do(cmd.Context(), op, v, messages.HostDirArgs{HostDir: abs, Path: vaultPath}, &r); err != nil {
		return true, err
	}
	if op != messages.OpImportDir {
		files, bytes = r.Files, r.Bytes
	}
	prog := a.newTransfer(verb, files, bytes)
	prog.add(r.Files, r.Bytes)
	prog.finish()
	return true, a.emit(r)
}

// importTree copies hostDir into the vault: in-process in one
// transaction, through a fleet in batches of requests (which a failure
// can stop half way).
func (a *app) importTree(cmd *cobra.Command, v, hostDir, dst string) error {
	if st, err := os.Stat(hostDir); err == nil && st.IsDir() {
		// Every bad name listed, before anything is written (the vault
		// would refuse the first one only).
		if err := checkHostNames(hostDir); err != nil {
			return err
		}
	}
	if done, err := a.hostDirOp(cmd, messages.OpImportDir, v, hostDir, dst); done {
		return err
	}
	start := time.Now()
	ctx := cmd.Context()
	fc, err := a.fleet(ctx)
	if err != nil {
		return err
	}
	// Through a fleet, a batch must fit one message, and a file that
	// would not is uploaded on its own and named in the batch.
	maxBatch, maxInline := batchBytes, math.MaxInt
	if fc != nil {
		maxBatch = min(maxBatch, fc.MaxInline()/2)
		maxInline = maxBatch
	}
	var total messages.BatchResult
	var prog *transfer
	var batch messages.WriteBatchArgs
	var size int
	objects := false
	flush := func() error {
		if len(batch.Files) == 0 {
			return nil
		}
		var r messages.BatchResult
		bctx := ctx
		if objects {
			bctx = client.ViaIntake(ctx)
		}
		if _, err := a.do(bctx, messages.OpWriteBatch, v, batch, &r); err != nil {
			return err
		}
		objects = false
		total.Files += r.Files
		total.Dirs += r.Dirs
		total.Bytes += r.Bytes
		prog.add(r.Files, r.Bytes)
		batch.Files, size = batch.Files[:0], 0
		return nil
	}
	st, err := os.Stat(hostDir)
	if err != nil {
		return messages.Errorf(messages.CodeNotFound, "%s: %v", hostDir, err)
	}
	if !st.IsDir() {
		return messages.Errorf(messages.CodeNotADirectory, "%s is not a directory", hostDir)
	}
	files, bytes := hostTotals(hostDir)
	prog = a.newTransfer("import", files, bytes)
	err = filepath.WalkDir(hostDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(hostDir, p)
		if err != nil {
			return err
		}
		vp := path.Join(dst, filepath.ToSlash(rel))
		info, err := d.Info()
		if err != nil {
			return err
		}
		f := messages.BatchFile{Path: vp, Mode: fmt.Sprintf("%04o", uint32(info.Mode().Perm())), Mtime: info.ModTime().UTC().Format(time.RFC3339Nano)}
		switch {
		case d.IsDir():
			f.Type = "dir"
		case d.Type()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			f.Type, f.Target, f.Mode = "symlink", t, ""
		case d.Type().IsRegular() && info.Size() > int64(maxInline):
			name, err := a.uploadFile(ctx, fc, v, p, info.Size())
			if err != nil {
				return err
			}
			f.Type, f.ContentObject = "file", name
			objects = true
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			f.Type, f.Content = "file", b
			if size+len(b) > maxBatch {
				if err := flush(); err != nil {
					return err
				}
			}
			size += len(b)
		default:
			return nil // sockets, devices, fifos have no place in a vault
		}
		if vp == "/" {
			return nil
		}
		batch.Files = append(batch.Files, f)
		// A batch naming an object goes at once: uploads wait in the
		// transfer bucket, which has a size limit, not in a queue here.
		if objects || len(batch.Files) >= batchFiles {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	prog.finish()
	if err != nil {
		return err
	}
	total.DurationMS = float64(time.Since(start).Microseconds()) / 1000
	return a.emit(total)
}

// checkHostNames refuses, before anything is imported, a host tree
// holding names (or symlink targets) that are not valid UTF-8: the wire
// would turn each into U+FFFD and fold different names into one, so the
// import would store fewer files than it read.
func checkHostNames(hostDir string) error {
	var bad []string
	filepath.WalkDir(hostDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // the import's own walk reports it
		}
		if !utf8.ValidString(p) {
			bad = append(bad, p)
		} else if d.Type()&fs.ModeSymlink != 0 {
			if t, err := os.Readlink(p); err == nil && !utf8.ValidString(t) {
				bad = append(bad, p)
			}
		}
		if len(bad) == 10 {
			return fs.SkipAll
		}
		return nil
	})
	if len(bad) == 0 {
		return nil
	}
	quoted := make([]string, len(bad))
	for i, p := range bad {
		quoted[i] = strconv.Quote(p)
	}
	e := messages.Errorf(messages.CodeInvalidPath, "%s holds names that are not valid UTF-8, e.g. %s: nothing imported (rename them first)", hostDir, quoted[0])
	e.Details = map[string]any{"paths": quoted}
	return e
}

func (a *app) exportTree(cmd *cobra.Command, v, src, hostDir string) error {
	if done, err := a.hostDirOp(cmd, messages.OpExportDir, v, hostDir, src); done {
		return err
	}
	start := time.Now()
	var total messages.BatchResult
	type dirTime struct {
		p string
		t time.Time
	}
	var dirs []dirTime
	// The vault knows its totals; a subtree's are not known up front.
	files, bytes := int64(-1), int64(0)
	if src == "/" {
		var info messages.VaultResult
		if _, err := a.do(cmd.Context(), messages.OpVaultInfo, v, nil, &info); err != nil {
			return err
		}
		files, bytes = info.Vault.Files, info.Vault.Bytes
	}
	prog := a.newTransfer("export", files, bytes)
	cursor := ""
	for {
		var page messages.ReadTreeResult
		if _, err := a.do(cmd.Context(), messages.OpReadTree, v, messages.ReadTreeArgs{Path: src, After: cursor, MaxBytes: batchBytes}, &page); err != nil {
			return err
		}
		if cursor == "" {
			// Made once the source is known to be there: a refused
			// export leaves the host as it was.
			if err := os.MkdirAll(hostDir, 0o755); err != nil {
				return err
			}
		}
		for _, f := range page.Files {
			rel := f.Path[len(src):]
			hp := filepath.Join(hostDir, filepath.FromSlash(rel))
			mode, err := handler.ParseMode(f.Mode)
			if err != nil {
				return err
			}
			// The host copy belongs to whoever runs the CLI: it gets
			// no setuid or setgid bits, and no fifos, sockets or devices.
			mode = mode.Perm()
			mt, _ := time.Parse(time.RFC3339Nano, f.Mtime)
			switch f.Type {
			case "dir":
				if err := vault.HostDirAt(hp); err != nil {
					return err
				}
				os.Chmod(hp, mode)
				dirs = append(dirs, dirTime{hp, mt})
				total.Dirs++
				continue
			case "symlink":
				os.Remove(hp)
				if err := os.Symlink(f.Target, hp); err != nil {
					return err
				}
				total.Files++
				prog.add(1, 0)
				continue
			case "file":
			default:
				continue
			}
			if err := vault.WriteHostFile(hp, f.Content, mode, mt); err != nil {
				return err
			}
			total.Files++
			total.Bytes += int64(len(f.Content))
			prog.add(1, int64(len(f.Content)))
		}
		if page.Next == "" {
			break
		}
		cursor = page.Next
	}
	// Directory times last: writing files into them moved their mtimes.
	for i := len(dirs) - 1; i >= 0; i-- {
		os.Chtimes(dirs[i].p, dirs[i].t, dirs[i].t)
	}
	prog.finish()
	total.DurationMS = float64(time.Since(start).Microseconds()) / 1000
	return a.emit(total)
}

// uploadFile puts host file p in the transfer bucket for vault v.
func (a *app) uploadFile(ctx context.Context, fc *client.Client, v, p string, size int64) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	pr := a.bytesProgress("uploading "+filepath.Base(p), size)
	name, err := fc.Upload(ctx, a.cfg.Namespace, v, f, pr.report)
	pr.end()
	if err != nil {
		return "", &requestError{toErr(err)}
	}
	return name, nil
}
