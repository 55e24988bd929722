package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"reflect"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/avfs/avfs/messages"
)

// Output formats of --output.
const (
	outJSON  = "json"
	outYAML  = "yaml"
	outTable = "table"
	outWide  = "wide"
)

var outputFormats = []string{outJSON, outYAML, outTable, outWide}

// show prints a reply: the raw result document in JSON mode (exactly what
// the handler produced), the same document as YAML, else typed for a
// person.
func (a *app) show(raw json.RawMessage, typed any) error {
	switch a.format {
	case outJSON:
		_, err := fmt.Fprintf(a.stdout, "%s\n", raw)
		return err
	case outYAML:
		return writeYAML(a.stdout, raw)
	}
	return a.human(typed)
}

// emit prints a value built by the CLI itself, as show does.
func (a *app) emit(v any) error {
	if raw, ok := v.(json.RawMessage); ok {
		return a.show(raw, v)
	}
	if a.document() {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		return a.show(b, v)
	}
	return a.human(v)
}

func (a *app) human(v any) error {
	return printer{wide: a.format == outWide, now: time.Now()}.print(controlEscaper{a.stdout}, v)
}

// printHuman prints v for a person, in the narrow table format.
func printHuman(w io.Writer, v any) error {
	return printer{now: time.Now()}.print(controlEscaper{w}, v)
}

// controlEscaper writes what it is given with control characters spelled
// out (\x1b), tabs and newlines excepted: names and paths come from the
// vault, an agent's, and one holding an escape sequence must not drive
// the terminal of the person reading a listing.
type controlEscaper struct{ w io.Writer }

func (c controlEscaper) Write(p []byte) (int, error) {
	var out []byte // nil while p needs nothing spelled out
	for i := 0; i < len(p); i++ {
		b := p[i]
		if b == '\t' || b == '\n' || !isControlAt(p, i) {
			if out != nil {
				out = append(out, b)
			}
			continue
		}
		if out == nil {
			out = append(make([]byte, 0, len(p)+16), p[:i]...)
		}
		if b == 0xc2 { // a C1 control, U+0080 to U+009F, in UTF-8
			out = fmt.Appendf(out, `\u%04x`, p[i+1])
			i++
		} else {
			out = fmt.Appendf(out, `\x%02x`, b)
		}
	}
	if out == nil {
		return c.w.Write(p)
	}
	if _, err := c.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// isControlAt reports whether p[i] begins a control character: C0, DEL,
// or a C1 control in UTF-8.
func isControlAt(p []byte, i int) bool {
	b := p[i]
	return b < 0x20 || b == 0x7f || b == 0xc2 && i+1 < len(p) && p[i+1] >= 0x80 && p[i+1] <= 0x9f
}

// writeYAML re-encodes a JSON document as block YAML, keeping its key
// order (JSON is YAML: the parser reads it into nodes, whose flow style
// is then dropped).
func writeYAML(w io.Writer, raw []byte) error {
	var n yaml.Node
	if err := yaml.Unmarshal(raw, &n); err != nil {
		return fmt.Errorf("yaml: %w", err)
	}
	var clear func(*yaml.Node)
	clear = func(n *yaml.Node) {
		n.Style = 0
		for _, c := range n.Content {
			clear(c)
		}
	}
	clear(&n)
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return err
	}
	return enc.Close()
}

// printer renders results for a person: aligned tables, sizes in KiB and
// MiB, times as ages; wide adds columns and lists every change.
type printer struct {
	wide bool
	now  time.Time
}

// listLimit is how many paths of each kind a narrow change list shows.
const listLimit = 10

func (p printer) print(w io.Writer, v any) error {
	// Results come as values (emit) and as pointers (show): one switch.
	if rv := reflect.ValueOf(v); rv.IsValid() && rv.Kind() == reflect.Struct {
		ptr := reflect.New(rv.Type())
		ptr.Elem().Set(rv)
		v = ptr.Interface()
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	switch r := v.(type) {
	case *messages.VaultListResult:
		if len(r.Vaults) == 0 {
			fmt.Fprintln(tw, "no vaults yet: create one with `avfs vault create NAME`")
			break
		}
		if p.wide {
			fmt.Fprintln(tw, "NAME\tFILES\tDIRS\tSIZE\tSTORED\tCHECKPOINTS\tPARENT\tWORKER\tQUOTA\tCREATED\tEXPIRES")
		} else {
			fmt.Fprintln(tw, "NAME\tFILES\tSIZE\tCHECKPOINTS\tPARENT\tCREATED")
		}
		for _, x := range r.Vaults {
			if p.wide {
				expires := "-"
				if x.ExpiresAt != nil {
					expires = stamp(*x.ExpiresAt)
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", x.Name, x.Files, x.Dirs, size(x.Bytes), storedSize(x.StoredBytes),
					x.Checkpoints, deref(x.Parent), dash(x.Worker), quotaText(x.Quota), p.time(x.CreatedAt), expires)
			} else {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\n", x.Name, x.Files, size(x.Bytes), x.Checkpoints, deref(x.Parent), p.time(x.CreatedAt))
			}
		}
		p.unanswered(tw, r.Unanswered)
	case *messages.VaultResult:
		p.vault(tw, r.Vault)
	case *messages.ForkResult:
		p.vault(tw, r.Vault)
		fmt.Fprintf(tw, "forked from\t%s in %s\n", r.Source, ms(r.DurationMS))
	case *messages.TransferResult:
		p.vault(tw, r.Vault)
		fmt.Fprintf(tw, "file\t%s (%s)\n", r.File, size(r.Bytes))
	case *messages.DeletedResult:
		fmt.Fprintf(tw, "deleted %s\n", r.Deleted)
	case *messages.WriteResult:
		verb := "wrote"
		if r.Created {
			verb = "created"
		}
		fmt.Fprintf(tw, "%s %s (%s)\n", verb, r.Path, size(r.Size))
	case *messages.PathResult:
		switch {
		case r.From != "":
			fmt.Fprintf(tw, "%s -> %s\n", r.From, r.Path)
		case r.Removed:
			fmt.Fprintf(tw, "removed %s\n", r.Path)
		default:
			fmt.Fprintln(tw, r.Path)
		}
	case *messages.CatResult:
		if r.Content != nil {
			io.WriteString(w, *r.Content)
		} else if r.ContentBase64 != nil {
			fmt.Fprintf(w, "(binary, %s; `avfs cat --raw %s > FILE` writes the bytes)\n", size(r.Size), r.Path)
		}
	case *messages.LsResult:
		if p.wide {
			fmt.Fprintln(tw, "TYPE\tMODE\tSIZE\tMODIFIED\tINODE\tNAME")
		} else {
			fmt.Fprintln(tw, "TYPE\tMODE\tSIZE\tMODIFIED\tNAME")
		}
		for _, e := range r.Entries {
			name := e.Name
			if e.Type == "dir" {
				name += "/"
			}
			if e.Target != "" {
				name += " -> " + e.Target
			}
			if p.wide {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", e.Type, e.Mode, size(e.Size), p.time(e.Mtime), e.Ino, name)
			} else {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Type, e.Mode, size(e.Size), p.time(e.Mtime), name)
			}
		}
	case *messages.Entry:
		fmt.Fprintf(tw, "path\t%s\n", r.Path)
		fmt.Fprintf(tw, "type\t%s\n", r.Type)
		if r.Target != "" {
			fmt.Fprintf(tw, "target\t%s\n", r.Target)
		}
		fmt.Fprintf(tw, "size\t%s\n", sizeExact(r.Size))
		fmt.Fprintf(tw, "mode\t%s\n", r.Mode)
		fmt.Fprintf(tw, "modified\t%s (%s)\n", stamp(r.Mtime), p.age(r.Mtime))
		fmt.Fprintf(tw, "inode\t%d\n", r.Ino)
	case *messages.BatchResult:
		fmt.Fprintf(tw, "%s, %s, %s in %s\n", pluralize(r.Files, "file"), pluralize(r.Dirs, "dir"), size(r.Bytes), ms(r.DurationMS))
	case *messages.CheckpointResult:
		c := r.Checkpoint
		fmt.Fprintf(tw, "checkpoint %s saved: %d files, %s%s\n", c.Name, c.Files, size(c.Bytes), note(c.Message))
	case *messages.CheckpointListResult:
		if len(r.Checkpoints) == 0 {
			fmt.Fprintln(tw, "no checkpoints yet: save one with `avfs checkpoint save NAME`")
			break
		}
		fmt.Fprintln(tw, "NAME\tCREATED\tFILES\tSIZE\tAUTO\tMESSAGE")
		for _, c := range r.Checkpoints {
			auto := ""
			if c.Auto {
				auto = "auto"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", c.Name, p.time(c.CreatedAt), c.Files, size(c.Bytes), auto, c.Message)
		}
	case *messages.RestoreResult:
		c := r.Changes
		fmt.Fprintf(tw, "restored checkpoint %s (%d files, %s)\n", r.Checkpoint.Name, r.Checkpoint.Files, size(r.Checkpoint.Bytes))
		if len(c.Added)+len(c.Modified)+len(c.Deleted) == 0 {
			fmt.Fprintln(tw, "nothing had changed since the checkpoint")
			break
		}
		// changes runs from the checkpoint to the tree before the
		// restore: what it added the restore removed, and so on.
		p.changeList(tw, "-", "removed", c.Added)
		p.changeList(tw, "~", "reverted", c.Modified)
		p.changeList(tw, "+", "brought back", c.Deleted)
		fmt.Fprintf(tw, "removed %d, reverted %d, brought back %d\n", len(c.Added), len(c.Modified), len(c.Deleted))
	case *messages.DiffResult:
		to := r.To
		if to == "" {
			to = "the current tree"
		}
		fmt.Fprintf(tw, "from %s to %s\n", r.From, to)
		c := r.Changes
		p.changeList(tw, "+", "added", c.Added)
		p.changeList(tw, "~", "modified", c.Modified)
		p.changeList(tw, "-", "deleted", c.Deleted)
		fmt.Fprintf(tw, "%d added, %d modified, %d deleted (+%s/-%s)\n", len(c.Added), len(c.Modified), len(c.Deleted), size(c.BytesAdded), size(c.BytesRemoved))
	case *messages.QuotaResult:
		fmt.Fprintln(tw, "LIMIT\tUSED\tMAX")
		used := size(r.Usage.Bytes)
		if r.Usage.UniqueBytes != nil {
			used = size(*r.Usage.UniqueBytes) + " unique" // what the unique mode counts
		}
		fmt.Fprintf(tw, "max_size_mb\t%s\t%s\n", used, limit(r.Quota.MaxSizeMB, " MiB"))
		fmt.Fprintf(tw, "max_files\t%d\t%s\n", r.Usage.Files, limit(r.Quota.MaxFiles, ""))
		fmt.Fprintf(tw, "max_file_size_mb\t-\t%s\n", limit(r.Quota.MaxFileSizeMB, " MiB"))
	case *messages.AuditResult:
		if p.wide {
			fmt.Fprintln(tw, "ID\tTIME\tVAULT\tACTION\tPATH\tACTOR\tREQUEST\tTRACE")
		} else {
			fmt.Fprintln(tw, "ID\tTIME\tACTION\tPATH\tACTOR")
		}
		for _, e := range r.Events {
			if p.wide {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.ID, stamp(e.Time), e.Vault, e.Action, e.Path, e.Actor, e.RequestID, dash(e.TraceID))
			} else {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", e.ID, p.age(e.Time), e.Action, e.Path, e.Actor)
			}
		}
	case *messages.ApprovalListResult:
		if len(r.Approvals) == 0 {
			fmt.Fprintln(tw, "no approvals")
			p.unanswered(tw, r.Unanswered)
			break
		}
		fmt.Fprintln(tw, "ID\tVAULT\tSTATUS\tREQUESTED\tEXPIRES\tCOMMAND")
		pending := ""
		for _, x := range r.Approvals {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", x.ID, x.Vault, x.Status, p.age(x.RequestedAt), p.age(x.ExpiresAt), approvalCommand(x))
			if x.Status == "pending" && pending == "" {
				pending = x.ID
			}
		}
		p.unanswered(tw, r.Unanswered)
		if pending != "" {
			tw.Flush()
			fmt.Fprintf(w, "\nto run a pending command: avfs approval grant %s (or deny it: avfs approval deny %s --reason TEXT)\n", pending, pending)
		}
	case *messages.ApprovalResult:
		x := r.Approval
		fmt.Fprintf(tw, "approval\t%s\n", x.ID)
		fmt.Fprintf(tw, "status\t%s\n", x.Status)
		fmt.Fprintf(tw, "vault\t%s/%s\n", x.Namespace, x.Vault)
		fmt.Fprintf(tw, "command\t%s\n", approvalCommand(x))
		fmt.Fprintf(tw, "rule\t%s (%s)\n", x.Decision.Rule, x.Decision.Action)
		fmt.Fprintf(tw, "reason\t%s\n", x.Reason)
		fmt.Fprintf(tw, "requested\t%s\n", p.time(x.RequestedAt))
		fmt.Fprintf(tw, "expires\t%s\n", p.time(x.ExpiresAt))
		if e := x.Envelope; e != nil {
			exit := "-"
			if e.ExitCode != nil {
				exit = fmt.Sprint(*e.ExitCode)
			}
			fmt.Fprintf(tw, "ran\t%s, exit %s, %s, %s\n", e.Status, exit, ms(float64(e.DurationMS)), changeCounts(*e.Changes))
		}
	case *messages.PolicyCheckResult:
		d := r.Decision
		fmt.Fprintf(tw, "decision\t%s\n", d.Action)
		fmt.Fprintf(tw, "rule\t%s\n", d.Rule)
		fmt.Fprintf(tw, "reason\t%s\n", d.Reason)
		if len(d.Categories) > 0 {
			fmt.Fprintf(tw, "categories\t%s\n", strings.Join(d.Categories, ", "))
		}
	case *messages.FleetStatus:
		if len(r.Workers) == 0 {
			fmt.Fprintln(tw, "no workers")
		} else {
			fmt.Fprintln(tw, "WORKER\tVAULTS\tRUNNING EXECS\tLOAD\tLAST SEEN")
			for _, m := range r.Workers {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f\t%s\n", m.ID, m.Vaults, m.RunningExecs, m.Load, p.time(m.LastSeen))
			}
		}
		tw.Flush()
		fmt.Fprintf(w, "%d dispatcher(s)\n", r.Dispatchers)
	case *messages.DeadLetters:
		if len(r.Dead) == 0 {
			fmt.Fprintln(tw, "no dead-lettered requests")
			break
		}
		fmt.Fprintln(tw, "SEQ\tTIME\tOP\tVAULT\tWORKER\tREASON")
		for _, d := range r.Dead {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s/%s\t%s\t%s\n", d.Seq, p.age(d.Time), d.Op, d.Namespace, d.Vault, dash(d.Worker), d.Reason)
		}
	case *policyDoc:
		p.policy(tw, *r)
	case *versionInfo:
		fmt.Fprintf(tw, "avfs %s (commit %s, built with %s, %s, protocol %s)\n", r.Version, r.Commit, r.Built, r.Go, r.Protocol)
	case *configDoc:
		keys := make([]string, 0, len(r.Config))
		for k := range r.Config {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Fprintln(tw, "KEY\tVALUE")
		for _, k := range keys {
			val := scalar(r.Config[k])
			if k == "policy.rules" && val == "[]" {
				val = "[] (the built-in rules: avfs policy show)"
			}
			fmt.Fprintf(tw, "%s\t%s\n", k, val)
		}
	default:
		return p.fields(tw, v)
	}
	return nil
}

// fields prints any other document as "key  value" lines, nested
// objects flattened to dotted keys.
func (p printer) fields(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		fmt.Fprintf(w, "%s\n", b)
		return nil
	}
	flat := map[string]any{}
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			if sub, ok := v.(map[string]any); ok && len(sub) > 0 {
				walk(prefix+k+".", sub)
				continue
			}
			flat[prefix+k] = v
		}
	}
	walk("", m)
	keys := make([]string, 0, len(flat))
	for k := range flat {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := scalar(flat[k])
		if n, ok := flat[k].(json.Number); ok && strings.HasSuffix(k, "duration_ms") {
			if f, err := n.Float64(); err == nil {
				v = ms(f)
			}
		}
		fmt.Fprintf(w, "%s\t%s\n", k, v)
	}
	return nil
}

// scalar renders a config or document value: durations as durations,
// lists comma-separated, everything else as JSON without quotes.
func scalar(v any) string {
	switch x := v.(type) {
	case nil:
		return "-"
	case string:
		if x == "" {
			return `""`
		}
		return x
	case time.Duration:
		return x.String()
	case []string:
		if len(x) == 0 {
			return "[]"
		}
		return strings.Join(x, ", ")
	}
	b, _ := json.Marshal(v)
	return strings.Trim(string(b), `"`)
}

// storedSize is a vault's deduplicated size, "-" where it was not
// computed (a fork's reply leaves it to vault info).
func storedSize(n *int64) string {
	if n == nil {
		return "-"
	}
	return size(*n)
}

func (p printer) vault(w io.Writer, v messages.VaultInfo) {
	fmt.Fprintf(w, "vault\t%s/%s\n", v.Namespace, v.Name)
	fmt.Fprintf(w, "files\t%d (%d dirs)\n", v.Files, v.Dirs)
	fmt.Fprintf(w, "size\t%s (stored %s)\n", size(v.Bytes), storedSize(v.StoredBytes))
	fmt.Fprintf(w, "checkpoints\t%d\n", v.Checkpoints)
	if v.Parent != nil {
		fmt.Fprintf(w, "parent\t%s\n", *v.Parent)
	}
	fmt.Fprintf(w, "quota\t%s\n", quotaText(v.Quota))
	if v.Worker != "" {
		fmt.Fprintf(w, "worker\t%s\n", v.Worker)
	}
	fmt.Fprintf(w, "created\t%s\n", p.time(v.CreatedAt))
	if v.ExpiresAt != nil {
		fmt.Fprintf(w, "expires\t%s\n", stamp(*v.ExpiresAt))
	}
}

// changeList prints up to listLimit paths of one kind (all when wide).
// A narrow list folds a directory's contents into its line: a restore
// that removed a build's target/ says so in one line, not sixty.
func (p printer) changeList(w io.Writer, mark, verb string, l []messages.Change) {
	type row struct {
		messages.Change
		entries int
	}
	var rows []row
	for i := 0; i < len(l); i++ {
		r := row{Change: l[i]}
		if !p.wide && r.Type == "dir" {
			// The list is sorted by path: what lies under dir/ is one run
			// from the first path >= "dir/".
			prefix := r.Path + "/"
			j := i + 1 + sort.Search(len(l)-i-1, func(k int) bool { return l[i+1+k].Path >= prefix })
			k := j
			for k < len(l) && strings.HasPrefix(l[k].Path, prefix) {
				r.entries++
				r.Size += l[k].Size
				k++
			}
			if r.entries > 0 {
				// Entries between dir and dir/ ("dir-x") keep their rows.
				rows = append(rows, r)
				for _, c := range l[i+1 : j] {
					rows = append(rows, row{Change: c})
				}
				i = k - 1
				continue
			}
		}
		rows = append(rows, r)
	}
	for i, r := range rows {
		if i == listLimit && !p.wide {
			fmt.Fprintf(w, "  %s\t… and %d more %s (--output wide lists every path)\t\n", mark, len(rows)-i, verb)
			return
		}
		if r.entries > 0 {
			fmt.Fprintf(w, "  %s\t%s/ (%s)\t%s\n", mark, r.Path, pluralize(int64(r.entries), "entry"), size(r.Size))
			continue
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\n", mark, r.Path, size(r.Size))
	}
}

func (p printer) unanswered(w io.Writer, workers []string) {
	if len(workers) > 0 {
		fmt.Fprintf(w, "(no answer in time from %s: the list may be incomplete)\n", strings.Join(workers, ", "))
	}
}

// time is an age on a narrow table and the timestamp itself when wide.
func (p printer) time(ts string) string {
	if p.wide || ts == "" {
		return stamp(ts)
	}
	return p.age(ts)
}

// stamp is an RFC 3339 time to the second, in UTC.
func stamp(ts string) string {
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return dash(ts)
	}
	return t.UTC().Format(time.RFC3339)
}

// age renders an RFC 3339 time relative to now: "3m ago", "in 55m".
func (p printer) age(ts string) string {
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return dash(ts)
	}
	d := p.now.Sub(t)
	if d < 0 {
		return "in " + roughDuration(-d)
	}
	if d < time.Second {
		return "just now"
	}
	return roughDuration(d) + " ago"
}

// roughDuration keeps the largest unit or two, as kubectl's AGE does.
func roughDuration(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 24*time.Hour:
		h := int(d.Hours())
		if m := int(d.Minutes()) % 60; m != 0 && h < 10 {
			return fmt.Sprintf("%dh%dm", h, m)
		}
		return fmt.Sprintf("%dh", h)
	default:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
}

// size is n bytes for a person: 912 B, 1.5 KiB, 23 MiB.
func size(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB"}
	f := float64(n)
	for _, u := range units {
		f /= 1024
		if f < 1024 || u == units[len(units)-1] {
			if f < 10 {
				return fmt.Sprintf("%.1f %s", math.Floor(f*10)/10, u)
			}
			return fmt.Sprintf("%.0f %s", math.Floor(f), u)
		}
	}
	return ""
}

// sizeExact adds the exact count to a rounded size.
func sizeExact(n int64) string {
	if n < 1024 {
		return size(n)
	}
	return fmt.Sprintf("%s (%d bytes)", size(n), n)
}

// ms renders milliseconds as a duration: 0.42ms, 12ms, 1.83s, 2m5s.
func ms(v float64) string {
	d := time.Duration(v * float64(time.Millisecond))
	switch {
	case d < 10*time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func quotaText(q messages.QuotaArgs) string {
	return fmt.Sprintf("size %s, files %s, file size %s", limit(q.MaxSizeMB, " MiB"), limit(q.MaxFiles, ""), limit(q.MaxFileSizeMB, " MiB"))
}

func limit(p *int64, unit string) string {
	if p == nil {
		return "unlimited"
	}
	return fmt.Sprint(*p) + unit
}

func changeCounts(c messages.ChangeSummary) string {
	return fmt.Sprintf("%d added, %d modified, %d deleted", len(c.Added), len(c.Modified), len(c.Deleted))
}

func approvalCommand(x messages.Approval) string {
	if x.Shell != "" {
		return x.Shell
	}
	return strings.Join(x.Command, " ")
}

func note(msg string) string {
	if msg == "" {
		return ""
	}
	return ` "` + msg + `"`
}

func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

func deref(p *string) string {
	if p == nil {
		return "-"
	}
	return *p
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
