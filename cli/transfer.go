package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/avfs/avfs/client"
	"github.com/avfs/avfs/messages"
)

// Through a fleet, content too large for one message and vault exports
// move through the namespace's transfer bucket (client.Upload,
// client.Download); files named on the command line are always files
// of this machine. In-process, the handler reads and writes them itself.

// fleet is the fleet client, nil in-process.
func (a *app) fleet(ctx context.Context) (*client.Client, error) {
	c, err := a.connect(ctx)
	if err != nil {
		return nil, err
	}
	if n, ok := c.(natsClient); ok {
		return n.c, nil
	}
	return nil, nil
}

// byteProgress shows one stream of bytes (an upload or a download) with
// the import/export progress display: total 0 means unknown.
type byteProgress struct {
	t *transfer
	n int64
}

func (a *app) bytesProgress(verb string, total int64) *byteProgress {
	files := int64(1)
	if total <= 0 {
		files = -1
	}
	return &byteProgress{t: a.newTransfer(verb, files, total)}
}

// report is told the bytes moved so far.
func (p *byteProgress) report(n int64) {
	p.t.add(0, n-p.n)
	p.n = n
}

// end counts the stream as one file done and ends the display.
func (p *byteProgress) end() {
	p.t.add(1, 0)
	p.t.finish()
}

// writeFrom writes what r yields to w.Path: inline when it fits one
// request, else uploaded first.
func (a *app) writeFrom(cmd *cobra.Command, v string, w messages.WriteArgs, r io.Reader) error {
	ctx := cmd.Context()
	fc, err := a.fleet(ctx)
	if err != nil {
		return err
	}
	if fc == nil {
		if w.Content, err = io.ReadAll(r); err != nil {
			return err
		}
		return call[messages.WriteResult](a, cmd, messages.OpWrite, v, w)
	}
	head := make([]byte, fc.MaxInline()+1)
	n, err := io.ReadFull(r, head)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		w.Content = head[:n]
		return call[messages.WriteResult](a, cmd, messages.OpWrite, v, w)
	}
	if err != nil {
		return err
	}
	pr := a.bytesProgress("uploading", 0)
	name, err := fc.Upload(ctx, a.cfg.Namespace, v, io.MultiReader(bytes.NewReader(head[:n]), r), pr.report)
	pr.end()
	if err != nil {
		return &requestError{toErr(err)}
	}
	w.ContentObject = name
	var out messages.WriteResult
	raw, err := a.do(client.ViaIntake(ctx), messages.OpWrite, v, w, &out)
	if err != nil {
		return err
	}
	return a.show(raw, &out)
}

// tooLargeForReply reports whether err is a worker's refusal of a result
// that cannot fit one reply.
func tooLargeForReply(err error) bool {
	var re *requestError
	if !errors.As(err, &re) || re.err.Code != messages.CodeInvalidArgument {
		return false
	}
	_, ok := re.err.Details["max_reply"]
	return ok
}

// catFleet prints the JSON document of file p: inline when it fits a
// reply, else downloaded from the transfer bucket through a temporary
// file, to learn whether it is text before the document starts. (The
// bytes alone go through catRaw.)
func (a *app) catFleet(cmd *cobra.Command, fc *client.Client, v, p string) error {
	ctx := cmd.Context()
	var out messages.CatResult
	raw, err := a.do(ctx, messages.OpCat, v, messages.CatArgs{Path: p}, &out)
	if tooLargeForReply(err) {
		raw, err = a.do(client.ViaIntake(ctx), messages.OpCat, v, messages.CatArgs{Path: p, Object: true}, &out)
	}
	if err != nil {
		return err
	}
	if out.Object == nil {
		return a.show(raw, &out)
	}
	f, err := os.CreateTemp("", "avfs-cat-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	var text utf8Check
	if err := a.download(ctx, fc, *out.Object, io.MultiWriter(f, &text), true); err != nil {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	return catJSON(a.stdout, out.Path, out.Size, f, text.valid())
}

// download copies ref to w, showing progress on stderr when asked.
func (a *app) download(ctx context.Context, fc *client.Client, ref messages.ObjectRef, w io.Writer, progress bool) error {
	var fn func(int64)
	if progress {
		pr := a.bytesProgress("downloading", ref.Size)
		fn = pr.report
		defer pr.end()
	}
	if err := fc.Download(ctx, a.cfg.Namespace, ref, w, fn); err != nil {
		return &requestError{messages.Errorf(messages.CodeUnavailable, "%v", err)}
	}
	return nil
}

// runeCut is where b, a piece of UTF-8 text that may go on, can be cut
// without splitting a rune.
func runeCut(b []byte) int {
	for i := 1; i <= utf8.UTFMax && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return len(b) - i
			}
			break
		}
	}
	return len(b)
}

// utf8Check is a writer that learns whether what it is given is UTF-8,
// however it is split into writes.
type utf8Check struct {
	carry []byte // an incomplete rune at the end of the last write
	bad   bool
}

func (u *utf8Check) Write(p []byte) (int, error) {
	if u.bad {
		return len(p), nil
	}
	b := append(u.carry, p...)
	cut := runeCut(b)
	u.bad = !utf8.Valid(b[:cut])
	u.carry = append(u.carry[:0], b[cut:]...)
	return len(p), nil
}

func (u *utf8Check) valid() bool { return !u.bad && len(u.carry) == 0 }

// catJSON prints the file.cat document for content read from r, as the
// handler encodes it, without holding the content in memory.
func catJSON(w io.Writer, path string, size int64, r io.Reader, text bool) error {
	head, _ := json.Marshal(path)
	field := "content_base64"
	if text {
		field = "content"
	}
	if _, err := fmt.Fprintf(w, `{"path":%s,"size":%d,%q:"`, head, size, field); err != nil {
		return err
	}
	if text {
		buf := make([]byte, 256<<10)
		carry := 0
		for {
			n, err := io.ReadFull(r, buf[carry:])
			n += carry
			done := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
			if err != nil && !done {
				return err
			}
			cut := n
			if !done {
				cut = runeCut(buf[:n]) // the rest goes with the next piece
			}
			q, _ := json.Marshal(string(buf[:cut]))
			if _, err := w.Write(q[1 : len(q)-1]); err != nil {
				return err
			}
			if done {
				break
			}
			carry = copy(buf, buf[cut:n])
		}
	} else {
		enc := base64.NewEncoder(base64.StdEncoding, w)
		if _, err := io.Copy(enc, r); err != nil {
			return err
		}
		if err := enc.Close(); err != nil {
			return err
		}
	}
	_, err := io.WriteString(w, "\"}\n")
	return err
}

// exportFleet fetches the export of vault name into file, a file of
// this machine.
func (a *app) exportFleet(cmd *cobra.Command, fc *client.Client, name, file string) error {
	ctx := cmd.Context()
	var out messages.TransferResult
	if _, err := a.do(client.ViaIntake(ctx), messages.OpVaultExport, name, nil, &out); err != nil {
		return err
	}
	if out.Object == nil {
		return &requestError{messages.Errorf(messages.CodeInternal, "the worker answered the export without an object")}
	}
	tmp := file + ".partial"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	err = a.download(ctx, fc, *out.Object, f, true)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, file); err != nil {
		return err
	}
	out.File, out.Object = file, nil
	return a.emit(&out)
}

// importFleet uploads file, a file of this machine, and imports it as
// vault name.
func (a *app) importFleet(cmd *cobra.Command, fc *client.Client, file, name string) error {
	ctx := cmd.Context()
	f, err := os.Open(file)
	if err != nil {
		return messages.Errorf(messages.CodeNotFound, "%s: %v", file, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	pr := a.bytesProgress("uploading", st.Size())
	obj, err := fc.Upload(ctx, a.cfg.Namespace, name, f, pr.report)
	pr.end()
	if err != nil {
		return &requestError{toErr(err)}
	}
	var out messages.TransferResult
	if _, err := a.do(client.ViaIntake(ctx), messages.OpVaultImport, name, messages.VaultTransferArgs{Object: obj}, &out); err != nil {
		return err
	}
	out.File = file
	return a.emit(&out)
}
