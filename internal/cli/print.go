package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/avfs/avfs/messages"
)

// show prints a reply: the raw result document in JSON mode (exactly what
// the handler produced), else typed for a person.
func (a *app) show(raw json.RawMessage, typed any) error {
	if a.json {
		_, err := fmt.Fprintf(a.stdout, "%s\n", raw)
		return err
	}
	return printHuman(a.stdout, typed)
}

func printHuman(w io.Writer, v any) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	switch r := v.(type) {
	case *messages.VaultListResult:
		fmt.Fprintln(tw, "NAME\tFILES\tDIRS\tBYTES\tCHECKPOINTS\tPARENT\tCREATED")
		for _, x := range r.Vaults {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\n", x.Name, x.Files, x.Dirs, x.Bytes, x.Checkpoints, deref(x.Parent), x.CreatedAt)
		}
	case *messages.VaultResult:
		printVault(tw, r.Vault)
	case *messages.ForkResult:
		printVault(tw, r.Vault)
		fmt.Fprintf(tw, "forked from\t%s in %.2f ms\n", r.Source, r.DurationMS)
	case *messages.LsResult:
		for _, e := range r.Entries {
			name := e.Name
			if e.Type == "dir" {
				name += "/"
			}
			if e.Target != "" {
				name += " -> " + e.Target
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", e.Type, e.Mode, e.Size, e.Mtime, name)
		}
	case *messages.CatResult:
		if r.Content != nil {
			io.WriteString(w, *r.Content)
		} else if r.ContentBase64 != nil {
			fmt.Fprintf(w, "(binary, %d bytes; use --json for content_base64)\n", r.Size)
		}
	case *messages.CheckpointListResult:
		fmt.Fprintln(tw, "NAME\tCREATED\tFILES\tBYTES\tAUTO\tMESSAGE")
		for _, c := range r.Checkpoints {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%v\t%s\n", c.Name, c.CreatedAt, c.Files, c.Bytes, c.Auto, c.Message)
		}
	case *messages.RestoreResult:
		fmt.Fprintf(tw, "restored\t%s\n", r.Checkpoint.Name)
		printChanges(tw, "undid", r.Changes)
	case *messages.DiffResult:
		fmt.Fprintf(tw, "diff\t%s -> %s\n", r.From, r.To)
		printChanges(tw, "", r.Changes)
	case *messages.AuditResult:
		fmt.Fprintln(tw, "ID\tTIME\tACTION\tPATH\tACTOR\tREQUEST")
		for _, e := range r.Events {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", e.ID, e.Time, e.Action, e.Path, e.Actor, e.RequestID)
		}
	default:
		// Everything else: its fields, one per line.
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			fmt.Fprintf(w, "%s\n", b)
			return nil
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			val, _ := json.Marshal(m[k])
			fmt.Fprintf(tw, "%s\t%s\n", k, strings.Trim(string(val), `"`))
		}
	}
	return nil
}

func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

func printVault(w io.Writer, v messages.VaultInfo) {
	q := func(p *int64) string {
		if p == nil {
			return "unlimited"
		}
		return fmt.Sprint(*p)
	}
	fmt.Fprintf(w, "vault\t%s/%s\n", v.Namespace, v.Name)
	fmt.Fprintf(w, "files\t%d (%d dirs)\n", v.Files, v.Dirs)
	if v.StoredBytes != nil {
		fmt.Fprintf(w, "bytes\t%d (stored %d)\n", v.Bytes, *v.StoredBytes)
	} else {
		fmt.Fprintf(w, "bytes\t%d\n", v.Bytes)
	}
	fmt.Fprintf(w, "checkpoints\t%d\n", v.Checkpoints)
	if v.Parent != nil {
		fmt.Fprintf(w, "parent\t%s\n", *v.Parent)
	}
	fmt.Fprintf(w, "quota\tsize %s MB, files %s, file size %s MB\n", q(v.Quota.MaxSizeMB), q(v.Quota.MaxFiles), q(v.Quota.MaxFileSizeMB))
	fmt.Fprintf(w, "created\t%s\n", v.CreatedAt)
}

func printChanges(w io.Writer, verb string, c messages.ChangeSummary) {
	for _, x := range c.Added {
		fmt.Fprintf(w, "  A\t%s\t%d\n", x.Path, x.Size)
	}
	for _, x := range c.Modified {
		fmt.Fprintf(w, "  M\t%s\t%d\n", x.Path, x.Size)
	}
	for _, x := range c.Deleted {
		fmt.Fprintf(w, "  D\t%s\t%d\n", x.Path, x.Size)
	}
	fmt.Fprintf(w, "%s\t%d added, %d modified, %d deleted (+%d/-%d bytes)\n", strings.TrimSpace(verb+" changes"),
		len(c.Added), len(c.Modified), len(c.Deleted), c.BytesAdded, c.BytesRemoved)
}

func deref(p *string) string {
	if p == nil {
		return "-"
	}
	return *p
}
