package cli

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progressf writes one status line to stderr (never stdout), unless
// --quiet.
func (a *app) progressf(format string, args ...any) {
	if !a.quiet {
		fmt.Fprintf(a.stderr, format, args...)
	}
}

// transfer reports the progress of an import or export on stderr: a bar
// with files, bytes, rate and ETA on a terminal; elsewhere (a log, a
// pipe) a plain line every plainEvery, without carriage returns; nothing
// with --quiet.
type transfer struct {
	verb         string
	files, bytes int64
	totalFiles   int64 // -1 when unknown
	totalBytes   int64
	start        time.Time
	bar          *progressbar.ProgressBar
	plain        io.Writer
	lastLine     time.Time
	lined        [2]int64 // files and bytes the last plain line showed
}

const plainEvery = 2 * time.Second

func (a *app) newTransfer(verb string, totalFiles, totalBytes int64) *transfer {
	t := &transfer{verb: verb, totalFiles: totalFiles, totalBytes: totalBytes, start: time.Now()}
	switch {
	case a.quiet:
	case isTerminal(a.stderr):
		max := totalBytes
		if totalFiles < 0 {
			max = -1 // a spinner: the total is not known
		}
		t.bar = progressbar.NewOptions64(max,
			progressbar.OptionSetWriter(a.stderr),
			progressbar.OptionSetDescription(t.describe()),
			progressbar.OptionShowBytes(true),
			progressbar.OptionShowCount(),
			progressbar.OptionShowTotalBytes(true),
			progressbar.OptionUseIECUnits(true),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionSetWidth(24),
			progressbar.OptionShowElapsedTimeOnFinish(),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(a.stderr) }),
		)
	default:
		t.plain = a.stderr
	}
	return t
}

func (t *transfer) describe() string {
	if t.totalFiles < 0 {
		return fmt.Sprintf("%s %d files", t.verb, t.files)
	}
	return fmt.Sprintf("%s %d/%d files", t.verb, t.files, t.totalFiles)
}

// add counts files and bytes done.
func (t *transfer) add(files, bytes int64) {
	t.files += files
	t.bytes += bytes
	switch {
	case t.bar != nil:
		// Describe draws at once, Add64 at most every 100ms (and when
		// the bar fills, which ends it: nothing may draw after that).
		t.bar.Describe(t.describe())
		t.bar.Add64(bytes)
	case t.plain != nil && time.Since(t.lastLine) >= plainEvery:
		t.line()
	}
}

// line is the plain form: "import: 120/450 files, 1.2 MiB of 4.0 MiB,
// 2.3 MiB/s, about 3s left".
func (t *transfer) line() {
	t.lastLine = time.Now()
	t.lined = [2]int64{t.files, t.bytes}
	el := time.Since(t.start)
	rate := float64(t.bytes) / max(el.Seconds(), 1e-3)
	s := fmt.Sprintf("%s, %s", t.describe(), size(t.bytes))
	if t.totalFiles >= 0 {
		s += " of " + size(t.totalBytes)
	}
	s += fmt.Sprintf(", %s/s", size(int64(rate)))
	if t.totalFiles >= 0 && rate > 0 && t.bytes < t.totalBytes {
		s += fmt.Sprintf(", about %s left", roughDuration(time.Duration(float64(t.totalBytes-t.bytes)/rate*float64(time.Second))))
	}
	fmt.Fprintln(t.plain, s)
}

// finish ends the bar, or writes the last plain line.
func (t *transfer) finish() {
	switch {
	case t.bar != nil:
		// A bar that reached its total has finished (and ended its
		// line) already; drawing it again would print it twice.
		if !t.bar.IsFinished() {
			t.bar.Describe(t.describe())
			t.bar.Finish()
		}
	case t.plain != nil && t.lined != [2]int64{t.files, t.bytes}:
		t.line() // unless the last line already said it all
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

// hostTotals counts the regular files, symlinks and bytes under dir, for
// the import's progress total (directories are not counted as files).
func hostTotals(dir string) (files, bytes int64) {
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				bytes += info.Size()
			}
		}
		if d.Type().IsRegular() || d.Type()&fs.ModeSymlink != 0 {
			files++
		}
		return nil
	})
	return files, bytes
}
