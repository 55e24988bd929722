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
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/avfs/avfs/client"
	"github.com/avfs/avfs/config"
	"github.com/avfs/avfs/handler"
	"github.com/avfs/avfs/messages"
)

func toErr(err error) *messages.Error { return handler.ToError(err) }

func configShow(a *app) map[string]any { return config.Show(a.viper) }

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

	cat := &cobra.Command{
		Use: "cat PATH", Short: "Print a file", Args: cobra.ExactArgs(1),
		RunE: a.vaultCmdE(func(cmd *cobra.Command, v string, args []string) error {
			fc, err := a.fleet(cmd.Context())
			if err != nil {
				return err
			}
			if fc != nil {
				return a.catFleet(cmd, fc, v, args[0])
			}
			return call[messages.CatResult](a, cmd, messages.OpCat, v, messages.CatArgs{Path: args[0]})
		}),
	}
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
			if !a.json && !long {
				for _, e := range out.Entries {
					name := e.Path
					if !l.Recursive {
						name = e.Name
					}
					if e.Type == "dir" {
						name += "/"
					}
					fmt.Fprintln(a.stdout, name)
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
	return []*cobra.Command{write, cat, lsCmd, stat, mkdir, rm, mv, cp, imp, exp}
}

// Import batches: many files per request and transaction, bounded so a
// batch fits a NATS message.
const (
	batchBytes = 4 << 20
	batchFiles = 2000
)

func (a *app) importTree(cmd *cobra.Command, v, hostDir, dst string) error {
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
		a.progress("imported %d files, %d dirs, %d bytes", total.Files, total.Dirs, total.Bytes)
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
	if err := checkHostNames(hostDir); err != nil {
		return err
	}
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
	fmt.Fprintln(a.stderr)
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
	start := time.Now()
	var total messages.BatchResult
	if err := os.MkdirAll(hostDir, 0o755); err != nil {
		return err
	}
	type dirTime struct {
		p string
		t time.Time
	}
	var dirs []dirTime
	cursor := ""
	for {
		var page messages.ReadTreeResult
		if _, err := a.do(cmd.Context(), messages.OpReadTree, v, messages.ReadTreeArgs{Path: src, After: cursor, MaxBytes: batchBytes}, &page); err != nil {
			return err
		}
		for _, f := range page.Files {
			rel := f.Path[len(src):]
			hp := filepath.Join(hostDir, filepath.FromSlash(rel))
			mode, err := handler.ParseMode(f.Mode)
			if err != nil {
				return err
			}
			mt, _ := time.Parse(time.RFC3339Nano, f.Mtime)
			switch f.Type {
			case "dir":
				if err := os.MkdirAll(hp, 0o755); err != nil {
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
				continue
			}
			if err := os.WriteFile(hp, f.Content, mode); err != nil {
				return err
			}
			os.Chmod(hp, mode)
			os.Chtimes(hp, mt, mt)
			total.Files++
			total.Bytes += int64(len(f.Content))
		}
		a.progress("exported %d files, %d dirs, %d bytes", total.Files, total.Dirs, total.Bytes)
		if page.Next == "" {
			break
		}
		cursor = page.Next
	}
	// Directory times last: writing files into them moved their mtimes.
	for i := len(dirs) - 1; i >= 0; i-- {
		os.Chtimes(dirs[i].p, dirs[i].t, dirs[i].t)
	}
	fmt.Fprintln(a.stderr)
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
