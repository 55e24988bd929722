package handler

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/avfs/avfs/messages"
	"github.com/avfs/avfs/telemetry"
	"github.com/avfs/avfs/vault"
)

// Handler serves requests against one store. It is safe for concurrent use.
type Handler struct {
	store  *vault.Store
	log    *slog.Logger
	worker string
	tracer trace.TracerProvider
	meter  metric.MeterProvider
	m      *metrics
	ops    map[messages.Op]op
	// onChange hooks run after a successful mutating request on a vault.
	onChange []func(op messages.Op, ns, vault string)
	// objects and maxReply are set in a fleet (UseObjects, objects.go).
	objects  Objects
	maxReply int
	onStop   []func()
	// sweep says which expired vaults maint.run deletes (SweepOwned).
	sweep func(vault.Expired) bool
}

// OnStop registers fn to run when the process serving h stops taking
// work (Stop): layers that run work of their own in the background (the
// worker's background runs) end it there, before the process hands its
// vaults on. Register hooks before serving.
func (h *Handler) OnStop(fn func()) { h.onStop = append(h.onStop, fn) }

// Stop runs the OnStop hooks, in order; each returns once its work ended.
func (h *Handler) Stop() {
	for _, fn := range h.onStop {
		fn()
	}
}

// OnChange registers fn to run after every successful mutating request on
// a vault, so layers that cache a vault (mounts) can drop what is stale.
// Register hooks before serving.
func (h *Handler) OnChange(fn func(op messages.Op, ns, vault string)) {
	h.onChange = append(h.onChange, fn)
}

// Changed runs the OnChange hooks for a change made to a vault outside a
// request (a worker replacing its copy with one pushed from elsewhere
// passes messages.OpVaultDelete: the old copy is gone).
func (h *Handler) Changed(op messages.Op, ns, vault string) {
	for _, fn := range h.onChange {
		fn(op, ns, vault)
	}
}

// Options configure a Handler.
type Options struct {
	Logger *slog.Logger
	// Worker is the id recorded as the owner of vaults this handler
	// creates and reported in envelopes; "local" in-process.
	Worker string
	// Tracer records the spans of checkpoint saves and restores; nil
	// means no tracing.
	Tracer trace.TracerProvider
	// Meter records request, quota, fork and checkpoint metrics; nil
	// means none.
	Meter metric.MeterProvider
}

// New returns a Handler serving store.
func New(store *vault.Store, o Options) *Handler {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Worker == "" {
		o.Worker = "local"
	}
	h := &Handler{store: store, log: o.Logger, worker: o.Worker, tracer: telemetry.Provider(o.Tracer), meter: telemetry.MeterProvider(o.Meter)}
	h.m = newMetrics(h.meter)
	h.ops = map[messages.Op]op{
		messages.OpVaultCreate:       bind(h.vaultCreate),
		messages.OpVaultList:         bind(h.vaultList),
		messages.OpVaultInfo:         bind(h.vaultInfo),
		messages.OpVaultFork:         bind(h.vaultFork),
		messages.OpVaultMerge:        bind(h.vaultMerge),
		messages.OpVaultDelete:       bind(h.vaultDelete),
		messages.OpVaultExport:       bind(h.vaultExport),
		messages.OpVaultImport:       bind(h.vaultImport),
		messages.OpWrite:             bind(h.write),
		messages.OpWriteBatch:        bind(h.writeBatch),
		messages.OpCat:               bind(h.cat),
		messages.OpLs:                bind(h.ls),
		messages.OpStat:              bind(h.stat),
		messages.OpMkdir:             bind(h.mkdir),
		messages.OpRm:                bind(h.rm),
		messages.OpMv:                bind(h.mv),
		messages.OpCp:                bind(h.cp),
		messages.OpLn:                bind(h.ln),
		messages.OpReadTree:          bind(h.readTree),
		messages.OpImportDir:         bind(h.importDir),
		messages.OpExportDir:         bind(h.exportDir),
		messages.OpCheckpointSave:    bind(h.checkpointSave),
		messages.OpCheckpointList:    bind(h.checkpointList),
		messages.OpCheckpointRestore: bind(h.checkpointRestore),
		messages.OpCheckpointDelete:  bind(h.checkpointDelete),
		messages.OpCheckpointDiff:    bind(h.checkpointDiff),
		messages.OpQuotaGet:          bind(h.quotaGet),
		messages.OpQuotaSet:          bind(h.quotaSet),
		messages.OpAudit:             bind(h.audit),
	}
	h.historyOps()
	h.searchOps()
	h.maintOps()
	h.sweep = func(vault.Expired) bool { return true }
	return h
}

// Register adds or replaces the implementation of op, which takes args
// of type A and returns a result of type R (the op's messages result
// type); the exec and approval layers plug in this way without the
// handler importing them.
func Register[A, R any](h *Handler, op messages.Op, fn func(ctx context.Context, req messages.Request, args A) (R, error)) {
	h.ops[op] = bind(fn)
}

// argsHashKey carries the request's HashArgs from bind to meta.
type argsHashKey struct{}

// HashArgs is the digest of a request's canonical arguments that the
// request log keeps with its id: the SHA-256 of args decoded into the
// op's type and encoded again, so spelling (field order, spaces,
// escapes) does not matter, the values do.
func HashArgs(args any) string {
	h := sha256.New()
	if err := json.NewEncoder(h).Encode(args); err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
}

// info converts a vault's Info; the handler serving the vault is its
// owner, so an empty owner is reported as this worker.
func (h *Handler) info(in vault.Info) messages.VaultInfo {
	if in.Worker == "" {
		in.Worker = h.worker
	}
	return vaultInfo(in)
}

// meta is the audit identity of a request's changes: who, which request,
// and the trace of the span serving it.
func meta(ctx context.Context, req messages.Request) vault.Meta {
	hash, _ := ctx.Value(argsHashKey{}).(string)
	return vault.Meta{Actor: req.Actor, RequestID: req.RequestID, ArgsHash: hash, TraceID: telemetry.TraceID(ctx)}
}

func (h *Handler) vault(req messages.Request) *vault.Vault {
	return h.store.Vault(req.Namespace, req.Vault)
}

func (h *Handler) vaultCreate(ctx context.Context, req messages.Request, a messages.VaultCreateArgs) (messages.VaultResult, error) {
	in, err := h.store.Create(ctx, req.Namespace, req.Vault, quota(a.Quota), meta(ctx, req))
	if err != nil {
		return messages.VaultResult{}, err
	}
	return messages.VaultResult{Vault: h.info(in)}, nil
}

func (h *Handler) vaultList(ctx context.Context, req messages.Request, _ struct{}) (messages.VaultListResult, error) {
	ins, err := h.store.List(ctx, req.Namespace)
	if err != nil {
		return messages.VaultListResult{}, err
	}
	out := messages.VaultListResult{Vaults: make([]messages.VaultInfo, len(ins))}
	for i, in := range ins {
		out.Vaults[i] = h.info(in)
	}
	return out, nil
}

func (h *Handler) vaultInfo(ctx context.Context, req messages.Request, _ struct{}) (messages.VaultResult, error) {
	in, err := h.vault(req).Info(ctx)
	if err != nil {
		return messages.VaultResult{}, err
	}
	return messages.VaultResult{Vault: h.info(in)}, nil
}

func (h *Handler) vaultFork(ctx context.Context, req messages.Request, a messages.VaultForkArgs) (messages.ForkResult, error) {
	if a.Target == "" {
		return messages.ForkResult{}, messages.Errorf(messages.CodeInvalidArgument, "fork needs a target vault name")
	}
	switch a.Placement {
	case "", messages.PlacementSource, messages.PlacementSpread:
	default:
		return messages.ForkResult{}, messages.Errorf(messages.CodeInvalidArgument, "placement %q: want %q or %q", a.Placement, messages.PlacementSource, messages.PlacementSpread)
	}
	ttl, err := duration("ttl", a.TTL)
	if err != nil {
		return messages.ForkResult{}, err
	}
	res, err := h.store.ForkWith(ctx, req.Namespace, req.Vault, a.Target, vault.ForkOptions{Checkpoint: a.Checkpoint, TTL: ttl}, meta(ctx, req))
	if err != nil {
		return messages.ForkResult{}, err
	}
	// The fork's Info as Fork built it: stored_bytes would walk the whole
	// tree, which would make a fork as slow as the tree is large.
	return messages.ForkResult{Vault: h.info(res.Info), Source: res.Source, DurationMS: float64(res.Duration.Microseconds()) / 1000}, nil
}

func (h *Handler) vaultDelete(ctx context.Context, req messages.Request, a messages.VaultDeleteArgs) (messages.DeletedResult, error) {
	if err := h.store.DeleteAsked(ctx, req.Namespace, req.Vault, a.IfExpired, meta(ctx, req)); err != nil {
		return messages.DeletedResult{}, err
	}
	return messages.DeletedResult{Deleted: req.Vault}, nil
}

func (h *Handler) vaultExport(ctx context.Context, req messages.Request, a messages.VaultTransferArgs) (messages.TransferResult, error) {
	if err := h.transferArgs(req.Op, a.File, a.Object); err != nil {
		return messages.TransferResult{}, err
	}
	if h.objects != nil {
		if a.Object != "" {
			return messages.TransferResult{}, messages.Errorf(messages.CodeInvalidArgument, "vault.export names its own object; it takes no args through a fleet")
		}
		return h.exportObject(ctx, req)
	}
	if a.File == "" {
		return messages.TransferResult{}, messages.Errorf(messages.CodeInvalidArgument, "export needs a file")
	}
	res, err := h.store.Export(ctx, req.Namespace, req.Vault, a.File)
	if err != nil {
		return messages.TransferResult{}, err
	}
	return messages.TransferResult{Vault: h.info(res.Info), File: res.File, Bytes: res.Bytes}, nil
}

func (h *Handler) vaultImport(ctx context.Context, req messages.Request, a messages.VaultTransferArgs) (messages.TransferResult, error) {
	if err := h.transferArgs(req.Op, a.File, a.Object); err != nil {
		return messages.TransferResult{}, err
	}
	if h.objects != nil {
		return h.importObject(ctx, req, a.Object)
	}
	if a.File == "" {
		return messages.TransferResult{}, messages.Errorf(messages.CodeInvalidArgument, "import needs a file")
	}
	res, err := h.store.Import(ctx, a.File, req.Namespace, req.Vault, meta(ctx, req))
	if err != nil {
		return messages.TransferResult{}, err
	}
	return messages.TransferResult{Vault: h.info(res.Info), File: res.File, Bytes: res.Bytes}, nil
}

// ParseMode parses an octal permission string such as "0644" or "755".
func ParseMode(s string) (fs.FileMode, error) {
	if s == "" {
		return 0, nil
	}
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o7777 {
		return 0, messages.Errorf(messages.CodeInvalidArgument, "mode %q: want octal permission bits like 0644", s)
	}
	return vault.FileMode(uint32(m)), nil
}

func (h *Handler) write(ctx context.Context, req messages.Request, a messages.WriteArgs) (messages.WriteResult, error) {
	mode, err := ParseMode(a.Mode)
	if err != nil {
		return messages.WriteResult{}, err
	}
	o := vault.WriteOptions{Mode: mode, Append: a.Append, Parents: a.Parents}
	if err := h.transferArgs(req.Op, "", a.ContentObject); err != nil {
		return messages.WriteResult{}, err
	}
	if a.ContentObject != "" {
		return h.writeObject(ctx, req, a, o)
	}
	r, err := h.vault(req).WriteFile(ctx, a.Path, a.Content, o, meta(ctx, req))
	if err != nil {
		return messages.WriteResult{}, err
	}
	return messages.WriteResult{Path: r.Path, Size: r.Size, Created: r.Created}, nil
}

func (h *Handler) writeBatch(ctx context.Context, req messages.Request, a messages.WriteBatchArgs) (messages.BatchResult, error) {
	start := time.Now()
	for _, f := range a.Files {
		if err := h.transferArgs(req.Op, "", f.ContentObject); err != nil {
			return messages.BatchResult{}, err
		}
		if f.ContentObject != "" {
			if err := objectOf(req, f.ContentObject); err != nil {
				return messages.BatchResult{}, err
			}
			defer h.objects.Delete(context.WithoutCancel(ctx), req.Namespace, f.ContentObject)
		}
	}
	var out messages.BatchResult
	err := h.vault(req).Update(ctx, meta(ctx, req), func(tx *vault.Tx) error {
		out = messages.BatchResult{}
		for _, f := range a.Files {
			mode, err := ParseMode(f.Mode)
			if err != nil {
				return err
			}
			switch f.Type {
			case "dir":
				if err := tx.Mkdir(f.Path, mode, true); err != nil {
					return err
				}
				out.Dirs++
			case "symlink":
				if err := replaceable(tx, f.Path); err != nil {
					return err
				}
				if err := tx.Mkdir(parentPath(f.Path), 0, true); err != nil {
					return err
				}
				if err := tx.Symlink(f.Target, f.Path); err != nil {
					return err
				}
				out.Files++
			case "file", "":
				r, err := h.batchFile(ctx, req, tx, f, vault.WriteOptions{Mode: mode, Parents: true})
				if err != nil {
					return err
				}
				out.Files++
				out.Bytes += r.Size
			default:
				return messages.Errorf(messages.CodeInvalidArgument, "%s: unknown type %q", f.Path, f.Type)
			}
			if f.Mtime != "" {
				mt, err := time.Parse(time.RFC3339Nano, f.Mtime)
				if err != nil {
					return messages.Errorf(messages.CodeInvalidArgument, "%s: mtime %q: %v", f.Path, f.Mtime, err)
				}
				if _, err := tx.SetAttr(f.Path, nil, &mt); err != nil {
					return err
				}
			}
		}
		return nil
	})
	out.DurationMS = float64(time.Since(start).Microseconds()) / 1000
	return out, err
}

// replaceable removes a non-directory at p so a batch can put a new entry
// there; a missing entry is fine.
func replaceable(tx *vault.Tx, p string) error {
	e, err := tx.Stat(p)
	if err != nil {
		return nil
	}
	if e.Kind == vault.KindDir {
		return fmt.Errorf("%s: %w", p, vault.ErrIsDir)
	}
	return tx.Remove(p, vault.RemoveOptions{FileOnly: true})
}

func parentPath(p string) string {
	i := strings.LastIndexByte(strings.TrimSuffix(p, "/"), '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}

func (h *Handler) cat(ctx context.Context, req messages.Request, a messages.CatArgs) (messages.CatResult, error) {
	if h.maxReply > 0 {
		// Content that cannot fit a reply is never read into memory:
		// it goes through the transfer bucket, or is refused at once.
		e, err := h.vault(req).Stat(ctx, a.Path)
		if err == nil && e.Kind == vault.KindFile && e.Size > int64(h.maxReply) {
			if !a.Object {
				return messages.CatResult{}, h.tooLarge(e.Path, e.Size)
			}
			return h.catObject(ctx, req, a)
		}
	}
	data, e, err := h.vault(req).ReadFile(ctx, a.Path)
	if err != nil {
		return messages.CatResult{}, err
	}
	out := messages.CatResult{Path: e.Path, Size: e.Size}
	if utf8.Valid(data) {
		s := string(data)
		out.Content = &s
	} else {
		s := base64.StdEncoding.EncodeToString(data)
		out.ContentBase64 = &s
	}
	if n, ok := h.catFits(out); !ok {
		if !a.Object {
			return messages.CatResult{}, h.tooLarge("the file.cat result", n)
		}
		return h.catObject(ctx, req, a)
	}
	return out, nil
}

func (h *Handler) stat(ctx context.Context, req messages.Request, a messages.PathArgs) (any, error) {
	e, err := h.vault(req).Stat(ctx, a.Path)
	if err != nil {
		return nil, err
	}
	return entry(e), nil
}

func (h *Handler) ls(ctx context.Context, req messages.Request, a messages.LsArgs) (messages.LsResult, error) {
	if a.Path == "" {
		a.Path = "/"
	}
	out := messages.LsResult{Entries: []messages.Entry{}}
	err := h.vault(req).View(ctx, func(tx *vault.Tx) error {
		e, err := tx.Stat(a.Path)
		if err != nil {
			return err
		}
		out.Path = e.Path
		if e.Kind != vault.KindDir {
			out.Entries = append(out.Entries, entry(e))
			return nil
		}
		var walk func(p string) error
		walk = func(p string) error {
			es, err := tx.ReadDir(p)
			if err != nil {
				return err
			}
			for _, e := range es {
				out.Entries = append(out.Entries, entry(e))
				if a.Recursive && e.Kind == vault.KindDir {
					if err := walk(e.Path); err != nil {
						return err
					}
				}
			}
			return nil
		}
		return walk(e.Path)
	})
	if err != nil {
		return messages.LsResult{}, err
	}
	return out, nil
}

func (h *Handler) mkdir(ctx context.Context, req messages.Request, a messages.MkdirArgs) (messages.PathResult, error) {
	mode, err := ParseMode(a.Mode)
	if err != nil {
		return messages.PathResult{}, err
	}
	if err := h.vault(req).Mkdir(ctx, a.Path, mode, a.Parents, meta(ctx, req)); err != nil {
		return messages.PathResult{}, err
	}
	return messages.PathResult{Path: a.Path}, nil
}

func (h *Handler) rm(ctx context.Context, req messages.Request, a messages.RmArgs) (messages.PathResult, error) {
	err := h.vault(req).Remove(ctx, a.Path, vault.RemoveOptions{Recursive: a.Recursive}, meta(ctx, req))
	if a.Force && isNotFound(err) {
		return messages.PathResult{Path: a.Path, Removed: false}, nil
	}
	if err != nil {
		return messages.PathResult{}, err
	}
	return messages.PathResult{Path: a.Path, Removed: true}, nil
}

func isNotFound(err error) bool {
	return err != nil && ToError(err).Code == messages.CodeNotFound
}

func (h *Handler) mv(ctx context.Context, req messages.Request, a messages.MoveArgs) (messages.PathResult, error) {
	if err := h.vault(req).Rename(ctx, a.Src, a.Dst, vault.RenameOptions{}, meta(ctx, req)); err != nil {
		return messages.PathResult{}, err
	}
	return messages.PathResult{Path: a.Dst, From: a.Src}, nil
}

func (h *Handler) ln(ctx context.Context, req messages.Request, a messages.MoveArgs) (messages.PathResult, error) {
	if err := h.vault(req).Link(ctx, a.Src, a.Dst, meta(ctx, req)); err != nil {
		return messages.PathResult{}, err
	}
	return messages.PathResult{Path: a.Dst, From: a.Src}, nil
}

func (h *Handler) cp(ctx context.Context, req messages.Request, a messages.MoveArgs) (messages.PathResult, error) {
	if err := h.vault(req).Copy(ctx, a.Src, a.Dst, a.Recursive, meta(ctx, req)); err != nil {
		return messages.PathResult{}, err
	}
	return messages.PathResult{Path: a.Dst, From: a.Src}, nil
}

// readTree returns a page of the subtree at a.Path, depth first in name
// order, with file contents, for bulk export. The cursor (After, Next) is
// the number of entries already returned.
func (h *Handler) readTree(ctx context.Context, req messages.Request, a messages.ReadTreeArgs) (messages.ReadTreeResult, error) {
	if a.Path == "" {
		a.Path = "/"
	}
	skip := 0
	if a.After != "" {
		n, err := strconv.Atoi(a.After)
		if err != nil || n < 0 {
			return messages.ReadTreeResult{}, messages.Errorf(messages.CodeInvalidArgument, "read_tree cursor %q", a.After)
		}
		skip = n
	}
	out := messages.ReadTreeResult{Files: []messages.BatchFile{}}
	errFull := errors.New("page full")
	var size int64
	seen := 0
	err := h.vault(req).View(ctx, func(tx *vault.Tx) error {
		var walk func(p string) error
		walk = func(p string) error {
			es, err := tx.ReadDir(p)
			if err != nil {
				return err
			}
			for _, e := range es {
				seen++
				if seen > skip {
					if a.MaxBytes > 0 && size > 0 && size+e.Size > a.MaxBytes {
						out.Next = strconv.Itoa(seen - 1)
						return errFull
					}
					f := messages.BatchFile{Path: e.Path, Type: e.Kind.String(), Mode: fmt.Sprintf("%04o", vault.ModeBits(e.Mode)), Target: e.Target, Mtime: rfc3339(e.Mtime)}
					if e.Kind == vault.KindFile {
						data, _, err := tx.ReadFile(e.Path)
						if err != nil {
							return err
						}
						f.Content = data
						size += int64(len(data))
					}
					out.Files = append(out.Files, f)
				}
				if e.Kind == vault.KindDir {
					if err := walk(e.Path); err != nil {
						return err
					}
				}
			}
			return nil
		}
		return walk(a.Path)
	})
	if err != nil && !errors.Is(err, errFull) {
		return messages.ReadTreeResult{}, err
	}
	return out, nil
}

const tracerName = "github.com/avfs/avfs/handler"

func (h *Handler) checkpointSave(ctx context.Context, req messages.Request, a messages.CheckpointArgs) (messages.CheckpointResult, error) {
	ctx, span := h.tracer.Tracer(tracerName).Start(ctx, "checkpoint.save", trace.WithAttributes(attribute.Bool("avfs.auto", false)))
	defer span.End()
	m := meta(ctx, req)
	m.Trace = telemetry.Serialize(ctx) // a restore links back to this span
	c, err := h.vault(req).SaveCheckpoint(ctx, a.Name, a.Message, false, m)
	if err != nil {
		telemetry.Fail(span, err)
		return messages.CheckpointResult{}, err
	}
	return messages.CheckpointResult{Checkpoint: checkpoint(c)}, nil
}

func (h *Handler) checkpointList(ctx context.Context, req messages.Request, _ struct{}) (messages.CheckpointListResult, error) {
	cs, err := h.vault(req).Checkpoints(ctx)
	if err != nil {
		return messages.CheckpointListResult{}, err
	}
	out := messages.CheckpointListResult{Checkpoints: make([]messages.Checkpoint, len(cs))}
	for i, c := range cs {
		out.Checkpoints[i] = checkpoint(c)
	}
	return out, nil
}

func (h *Handler) checkpointRestore(ctx context.Context, req messages.Request, a messages.CheckpointArgs) (messages.RestoreResult, error) {
	ctx, span := h.tracer.Tracer(tracerName).Start(ctx, "checkpoint.restore")
	defer span.End()
	r, err := h.vault(req).RestoreCheckpoint(ctx, a.Name, meta(ctx, req))
	if err != nil {
		telemetry.Fail(span, err)
		return messages.RestoreResult{}, err
	}
	// The checkpoint is known only once restored: link to the span that
	// saved it, which may belong to a long finished trace.
	if sc := telemetry.Parse(r.Checkpoint.Trace); sc.IsValid() {
		span.AddLink(trace.Link{SpanContext: sc})
	}
	return messages.RestoreResult{Checkpoint: checkpoint(r.Checkpoint), Changes: Changes(r.Changes), Direction: messages.RestoreUndone}, nil
}

func (h *Handler) checkpointDelete(ctx context.Context, req messages.Request, a messages.CheckpointArgs) (messages.DeletedResult, error) {
	if err := h.vault(req).DeleteCheckpoint(ctx, a.Name, meta(ctx, req)); err != nil {
		return messages.DeletedResult{}, err
	}
	return messages.DeletedResult{Deleted: a.Name}, nil
}

func (h *Handler) checkpointDiff(ctx context.Context, req messages.Request, a messages.DiffArgs) (messages.DiffResult, error) {
	if a.From == "" {
		return messages.DiffResult{}, messages.Errorf(messages.CodeInvalidArgument, "diff needs a checkpoint to compare from")
	}
	c, err := h.vault(req).Diff(ctx, a.From, a.To)
	if err != nil {
		return messages.DiffResult{}, err
	}
	to := a.To
	if to == "" {
		to = "current"
	}
	return messages.DiffResult{From: a.From, To: to, Changes: Changes(c)}, nil
}

func (h *Handler) quotaGet(ctx context.Context, req messages.Request, _ struct{}) (messages.QuotaResult, error) {
	q, u, err := h.vault(req).Quota(ctx)
	if err != nil {
		return messages.QuotaResult{}, err
	}
	return messages.QuotaResult{Quota: quotaArgs(q), Usage: messages.Usage{Bytes: u.Bytes, Files: u.Files, UniqueBytes: u.UniqueBytes}, Mode: u.Mode}, nil
}

func (h *Handler) quotaSet(ctx context.Context, req messages.Request, a messages.QuotaSetArgs) (any, error) {
	v := h.vault(req)
	q, _, err := v.Quota(ctx)
	if err != nil {
		return nil, err
	}
	val := a.Value // checked, with the others, by Quota.Validate
	switch a.Key {
	case "max_size_mb":
		q.MaxSizeMB = val
	case "max_files":
		q.MaxFiles = val
	case "max_file_size_mb":
		q.MaxFileSizeMB = val
	default:
		return nil, messages.Errorf(messages.CodeInvalidArgument, "quota key %q: want max_size_mb, max_files or max_file_size_mb", a.Key)
	}
	if _, err := v.SetQuota(ctx, q, meta(ctx, req)); err != nil {
		return nil, err
	}
	return h.quotaGet(ctx, req, struct{}{})
}

// ParseSince accepts an RFC 3339 time or a duration before now ("15m").
func ParseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, messages.Errorf(messages.CodeInvalidArgument, "since %q: want an RFC 3339 time or a duration like 15m", s)
}

func (h *Handler) audit(ctx context.Context, req messages.Request, a messages.AuditArgs) (messages.AuditResult, error) {
	since, err := ParseSince(a.Since, time.Now())
	if err != nil {
		return messages.AuditResult{}, err
	}
	evs, err := h.vault(req).Audit(ctx, vault.AuditFilter{Since: since, Action: a.Action, Path: a.Path, Limit: a.Limit, AfterID: a.AfterID})
	if err != nil {
		return messages.AuditResult{}, err
	}
	out := messages.AuditResult{Events: make([]messages.AuditEvent, len(evs))}
	for i, e := range evs {
		out.Events[i] = auditEvent(e)
	}
	return out, nil
}

type attemptKey struct{}

// WithAttempt records the delivery attempt serving a request (1 for the
// first), for envelopes and traces.
func WithAttempt(ctx context.Context, n int) context.Context {
	return context.WithValue(ctx, attemptKey{}, n)
}

// Attempt is the delivery attempt recorded in ctx, 1 if none.
func Attempt(ctx context.Context) int {
	if n, ok := ctx.Value(attemptKey{}).(int); ok && n > 0 {
		return n
	}
	return 1
}
