package handler

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/vault"
)

// Objects is where a fleet keeps content too large for one message: the
// transfer bucket of each namespace (messages.TransferBucket). A fleet
// worker sets it (UseObjects); a handler with Objects never touches a
// path its caller names on the machine it runs on, since that machine is
// not the caller's.
type Objects interface {
	// Open reads object name of namespace ns's bucket; a missing object
	// is a *messages.Error with CodeNotFound.
	Open(ctx context.Context, ns, name string) (io.ReadCloser, error)
	// Put stores what r yields as object name of ns's bucket.
	Put(ctx context.Context, ns, name string, r io.Reader) (messages.ObjectRef, error)
	// Delete removes object name of ns's bucket; a missing one is fine.
	Delete(ctx context.Context, ns, name string) error
}

// UseObjects makes h a fleet handler: large content goes through o, and
// no result may exceed maxReply bytes (the fleet's message limit less
// room for the reply's envelope). Call it before serving.
func (h *Handler) UseObjects(o Objects, maxReply int) {
	h.objects, h.maxReply = o, maxReply
}

// tooLarge refuses a result that cannot fit a reply: asking again
// cannot help, so it is INVALID_ARGUMENT, not UNAVAILABLE.
func (h *Handler) tooLarge(what string, n int64) *messages.Error {
	e := messages.Errorf(messages.CodeInvalidArgument, "%s is %d bytes, more than one reply of this fleet carries (%d bytes)", what, n, h.maxReply)
	e.Details = map[string]any{"size": n, "max_reply": h.maxReply}
	return e
}

// transferArgs refuses a transfer object outside a fleet, and a host path
// inside one.
func (h *Handler) transferArgs(op messages.Op, file, object string) error {
	switch {
	case h.objects == nil && object != "":
		return messages.Errorf(messages.CodeInvalidArgument, "%s: objects are for requests through a fleet; in-process, name a file", op)
	case h.objects != nil && file != "":
		return messages.Errorf(messages.CodeInvalidArgument,
			"%s: a request through a fleet never names a path on the worker's machine (file %q); the content moves through the namespace's transfer bucket (the CLI does this for you)", op, file)
	}
	return nil
}

// objectOf checks that object name belongs to req's vault: every
// transfer object is "<vault>/<id>" in the namespace's bucket.
func objectOf(req messages.Request, name string) error {
	if !strings.HasPrefix(name, req.Vault+"/") || len(name) == len(req.Vault)+1 || len(name) > 512 {
		return messages.Errorf(messages.CodeInvalidArgument, "object %q: want %q", name, messages.TransferObject(req.Vault, "<id>"))
	}
	return nil
}

// resultID names the objects a request leaves for its caller.
func resultID(req messages.Request, what string) string {
	id := req.RequestID
	if id == "" {
		id = "x"
	}
	return messages.TransferObject(req.Vault, what+"-"+id)
}

// writeObject writes file.write content from an object, streaming it
// into the vault, and deletes the object afterwards, whatever happened.
func (h *Handler) writeObject(ctx context.Context, req messages.Request, a messages.WriteArgs, o vault.WriteOptions) (messages.WriteResult, error) {
	if len(a.Content) > 0 {
		return messages.WriteResult{}, messages.Errorf(messages.CodeInvalidArgument, "file.write: content and content_object both set")
	}
	if err := objectOf(req, a.ContentObject); err != nil {
		return messages.WriteResult{}, err
	}
	defer h.objects.Delete(context.WithoutCancel(ctx), req.Namespace, a.ContentObject)
	r, err := h.vault(req).WriteFrom(ctx, a.Path, func() (io.ReadCloser, error) {
		return h.objects.Open(ctx, req.Namespace, a.ContentObject)
	}, o, meta(ctx, req))
	if err != nil {
		return messages.WriteResult{}, err
	}
	return messages.WriteResult{Path: r.Path, Size: r.Size, Created: r.Created}, nil
}

// catFits reports whether out fits one reply.
func (h *Handler) catFits(out messages.CatResult) (int64, bool) {
	if h.maxReply <= 0 {
		return 0, true
	}
	b, _ := json.Marshal(out)
	return int64(len(b)), len(b) <= h.maxReply
}

// catObject puts file a.Path in the namespace's transfer bucket, read
// from one snapshot of the vault, and names it.
func (h *Handler) catObject(ctx context.Context, req messages.Request, a messages.CatArgs) (messages.CatResult, error) {
	name := resultID(req, "cat")
	pr, pw := io.Pipe()
	var e vault.Entry
	var rerr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		e, rerr = h.vault(req).ReadTo(ctx, a.Path, pw)
		pw.CloseWithError(rerr)
	}()
	ref, err := h.objects.Put(ctx, req.Namespace, name, pr)
	pr.CloseWithError(fmt.Errorf("upload ended"))
	<-done
	if rerr != nil {
		h.objects.Delete(context.WithoutCancel(ctx), req.Namespace, name)
		return messages.CatResult{}, rerr
	}
	if err != nil {
		return messages.CatResult{}, err
	}
	return messages.CatResult{Path: e.Path, Size: e.Size, Object: &ref}, nil
}

// exportObject exports the vault to a file of the worker's own and puts
// it in the namespace's transfer bucket for the caller to fetch.
func (h *Handler) exportObject(ctx context.Context, req messages.Request) (messages.TransferResult, error) {
	dir, err := os.MkdirTemp("", "avfs-export-")
	if err != nil {
		return messages.TransferResult{}, fmt.Errorf("export: %w", err)
	}
	defer os.RemoveAll(dir)
	res, err := h.store.Export(ctx, req.Namespace, req.Vault, filepath.Join(dir, "vault.avfs"))
	if err != nil {
		return messages.TransferResult{}, err
	}
	f, err := os.Open(res.File)
	if err != nil {
		return messages.TransferResult{}, fmt.Errorf("export: %w", err)
	}
	defer f.Close()
	ref, err := h.objects.Put(ctx, req.Namespace, resultID(req, "export"), f)
	if err != nil {
		return messages.TransferResult{}, err
	}
	return messages.TransferResult{Vault: h.info(res.Info), Bytes: res.Bytes, Object: &ref}, nil
}

// importObject imports the export the caller put in the namespace's
// transfer bucket, then deletes it.
func (h *Handler) importObject(ctx context.Context, req messages.Request, name string) (messages.TransferResult, error) {
	if name == "" {
		return messages.TransferResult{}, messages.Errorf(messages.CodeInvalidArgument, "vault.import needs the object holding the export")
	}
	if err := objectOf(req, name); err != nil {
		return messages.TransferResult{}, err
	}
	defer h.objects.Delete(context.WithoutCancel(ctx), req.Namespace, name)
	dir, err := os.MkdirTemp("", "avfs-import-")
	if err != nil {
		return messages.TransferResult{}, fmt.Errorf("import: %w", err)
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "vault.avfs")
	if err := h.fetch(ctx, req.Namespace, name, file); err != nil {
		return messages.TransferResult{}, err
	}
	res, err := h.store.Import(ctx, file, req.Namespace, req.Vault, meta(ctx, req))
	if err != nil {
		return messages.TransferResult{}, err
	}
	return messages.TransferResult{Vault: h.info(res.Info), Bytes: res.Bytes}, nil
}

// fetch copies object name of ns's bucket to file.
func (h *Handler) fetch(ctx context.Context, ns, name, file string) error {
	r, err := h.objects.Open(ctx, ns, name)
	if err != nil {
		return err
	}
	defer r.Close()
	f, err := os.OpenFile(file, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return fmt.Errorf("import: fetch %s: %w", name, err)
	}
	return f.Close()
}

// batchFile writes one file of a write batch, from its object if it
// names one.
func (h *Handler) batchFile(ctx context.Context, req messages.Request, tx *vault.Tx, f messages.BatchFile, o vault.WriteOptions) (vault.WriteResult, error) {
	if f.ContentObject == "" {
		return tx.WriteFile(f.Path, f.Content, o)
	}
	if len(f.Content) > 0 {
		return vault.WriteResult{}, messages.Errorf(messages.CodeInvalidArgument, "%s: content and content_object both set", f.Path)
	}
	r, err := h.objects.Open(ctx, req.Namespace, f.ContentObject)
	if err != nil {
		return vault.WriteResult{}, err
	}
	defer r.Close()
	return tx.WriteFrom(f.Path, r, o)
}
