package cli

import (
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/avfs/avfs/messages"
)

// docResultTypes maps each command that docs/cli.md gives a JSON result
// to the Go type it prints: the documented fields must be among the
// type's JSON fields.
var docResultTypes = map[string]any{
	"vault create": messages.VaultResult{}, "vault list": messages.VaultListResult{}, "vault info": messages.VaultResult{},
	"vault use": messages.VaultResult{}, "vault fork": messages.ForkResult{}, "vault delete": messages.DeletedResult{},
	"vault merge": messages.MergeResult{}, "attempts run": messages.AttemptsResult{},
	"vault export": messages.TransferResult{}, "vault import": messages.TransferResult{},
	"write": messages.WriteResult{}, "cat": messages.CatResult{}, "ls": messages.LsResult{}, "stat": messages.Entry{},
	"mkdir": messages.PathResult{}, "rm": messages.PathResult{}, "mv": messages.PathResult{}, "cp": messages.PathResult{}, "ln": messages.PathResult{},
	"import": messages.BatchResult{}, "export": messages.BatchResult{},
	"checkpoint save": messages.CheckpointResult{}, "checkpoint list": messages.CheckpointListResult{},
	"checkpoint restore": messages.RestoreResult{}, "checkpoint delete": messages.DeletedResult{}, "checkpoint diff": messages.DiffResult{},
	"approval list": messages.ApprovalListResult{}, "approval grant": messages.ApprovalResult{}, "approval deny": messages.ApprovalResult{},
	"audit": messages.AuditResult{}, "quota": messages.QuotaResult{}, "quota set": messages.QuotaResult{},
	"policy check": messages.PolicyCheckResult{}, "policy show": policyDoc{},
	"serve": serveDoc{}, "fleet status": messages.FleetStatus{}, "fleet dlq list": messages.DeadLetters{}, "fleet gc": messages.ChunkGCResult{},
	"version": versionInfo{}, "config show": configDoc{},
	"vault settings": messages.VaultSettingsResult{}, "vault set": messages.VaultSettingsResult{},
	"stats": messages.StatsResult{}, "compact": messages.CompactResult{}, "maintain": messages.MaintainResult{},
	"audit clear": messages.AuditClearResult{}, "gc": gcDoc{},
	"keeper status": keeperStatus{}, "keeper stop": struct {
		Stopped bool `json:"stopped"`
	}{},
	"error": struct {
		Error errorWithHint `json:"error"`
	}{},
}

// docNamedTypes are the types docs/cli.md describes field by field
// ("`VaultInfo`: `name`, ...").
var docNamedTypes = map[string]any{"VaultInfo": messages.VaultInfo{}, "ChangeSummary": messages.ChangeSummary{}, "MergeConflict": messages.MergeConflict{}}

// gcDoc is what `avfs gc` prints (a map in gcCmd).
type gcDoc struct {
	Freed     messages.GCCounts `json:"freed"`
	WouldFree messages.GCCounts `json:"would_free"`
	DryRun    bool              `json:"dry_run"`
}

// serveDoc is what `avfs serve` prints (a map in serveCmd).
type serveDoc struct {
	URL    string `json:"url"`
	Worker string `json:"worker"`
	Home   string `json:"home"`
	HTTP   string `json:"http"`
}

var (
	codeSpan  = regexp.MustCompile("`([^`]+)`")
	jsonKey   = regexp.MustCompile(`([:|]?)\s*"([a-z_]+)"`)
	errorCode = regexp.MustCompile(`^[A-Z][A-Z_]+$`)
	ident     = regexp.MustCompile(`^[a-z_]+$`)
)

// TestDocsContract keeps docs/cli.md and docs/envelope.md true: every verb
// and flag they name exists in the command tree, every JSON field in the
// Go type that is printed, every error code in messages.Codes (and every
// code and envelope field is documented).
func TestDocsContract(t *testing.T) {
	a := &app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard}
	root := a.rootCmd()
	root.InitDefaultVersionFlag()
	b, err := os.ReadFile("../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	verbs := map[string]bool{}
	for _, c := range root.Commands() {
		verbs[c.Name()] = true
	}
	codes := map[string]bool{}
	section := ""
	for n, line := range strings.Split(string(b), "\n") {
		at := func(format string, args ...any) {
			t.Helper()
			t.Errorf("docs/cli.md:%d: "+format, append([]any{n + 1}, args...)...)
		}
		if strings.HasPrefix(line, "## ") {
			section = strings.TrimPrefix(line, "## ")
		}
		spans := codeSpan.FindAllStringSubmatch(strings.ReplaceAll(line, `\|`, "|"), -1)
		if len(spans) > 0 {
			if typ, ok := docNamedTypes[spans[0][1]]; ok && strings.HasPrefix(line, "`"+spans[0][1]+"`:") {
				fields := jsonFields(reflect.TypeOf(typ))
				for _, s := range spans[1:] {
					for _, f := range docFields(s[1]) {
						if !fields[f] {
							at("%s has no JSON field %q", spans[0][1], f)
						}
					}
				}
				continue
			}
		}
		var cmd *cobra.Command
		var path string
		for _, s := range spans {
			text := s[1]
			first, _, _ := strings.Cut(text, " ")
			switch {
			case section == "Errors" && errorCode.MatchString(text):
				codes[text] = true
				if !slices.Contains(messages.Codes(), messages.Code(text)) {
					at("error code %s is not in messages.Codes()", text)
				}
			case verbs[first]:
				var flags []string
				cmd, path, flags = resolve(root, text)
				for _, f := range flags {
					if !hasFlag(cmd, f) {
						at("`%s`: avfs %s has no flag %s", text, path, f)
					}
				}
			case strings.HasPrefix(text, "-") || strings.HasPrefix(text, "["):
				target := cmd
				if target == nil {
					target = root
				}
				for _, f := range flagTokens(text) {
					if !hasFlag(target, f) {
						at("`%s`: avfs %s has no flag %s", text, target.CommandPath(), f)
					}
				}
			case strings.HasPrefix(text, "{"):
				if section == "Errors" {
					cmd, path = root, "error"
				}
				if cmd == nil {
					at("JSON %s follows no command", text)
					continue
				}
				typ, ok := docResultTypes[path]
				if !ok {
					at("no Go type for `%s` in docResultTypes", path)
					continue
				}
				fields := jsonFields(reflect.TypeOf(typ))
				for _, f := range docFields(text) {
					if !fields[f] {
						at("`%s` prints no JSON field %q (%T)", path, f, typ)
					}
				}
			}
		}
	}
	for _, c := range messages.Codes() {
		if !codes[string(c)] {
			t.Errorf("docs/cli.md does not document error code %s", c)
		}
	}

	env, err := os.ReadFile("../docs/envelope.md")
	if err != nil {
		t.Fatal(err)
	}
	fields := jsonFields(reflect.TypeOf(messages.Envelope{}))
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile(`"([a-z_]+)":`).FindAllStringSubmatch(string(env), -1) {
		documented[m[1]] = true
		if !fields[m[1]] {
			t.Errorf("docs/envelope.md: messages.Envelope has no JSON field %q", m[1])
		}
	}
	et := reflect.TypeOf(messages.Envelope{})
	for i := range et.NumField() {
		name, _, _ := strings.Cut(et.Field(i).Tag.Get("json"), ",")
		if !documented[name] && !strings.Contains(string(env), "`"+name+"`") {
			t.Errorf("docs/envelope.md does not document envelope field %q", name)
		}
	}
}

// resolve finds the command a documented usage names ("vault fork SRC
// DST [--use]") and the flags it mentions.
func resolve(root *cobra.Command, usage string) (*cobra.Command, string, []string) {
	c := root
	var path []string
	for _, tok := range strings.Fields(usage) {
		if strings.HasPrefix(tok, "-") || strings.HasPrefix(tok, "[") {
			break
		}
		next := c
		for _, s := range c.Commands() {
			if s.Name() == tok {
				next = s
			}
		}
		if next == c {
			break
		}
		c = next
		path = append(path, tok)
	}
	return c, strings.Join(path, " "), flagTokens(usage)
}

// flagTokens are the flags a usage mentions: --name and -x, without
// values, brackets or "--" itself.
func flagTokens(usage string) []string {
	var out []string
	for _, tok := range strings.Fields(usage) {
		tok = strings.Trim(tok, "[]()|.,;")
		tok, _, _ = strings.Cut(tok, "=")
		if tok == "--" || tok == "-" || !strings.HasPrefix(tok, "-") {
			continue
		}
		out = append(out, tok)
	}
	return out
}

func hasFlag(c *cobra.Command, f string) bool {
	sets := []*pflag.FlagSet{c.Flags(), c.PersistentFlags(), c.InheritedFlags()}
	for _, fs := range sets {
		if name, ok := strings.CutPrefix(f, "--"); ok && fs.Lookup(name) != nil {
			return true
		}
		if sh, ok := strings.CutPrefix(f, "-"); ok && !strings.HasPrefix(sh, "-") && fs.ShorthandLookup(sh) != nil {
			return true
		}
	}
	return false
}

// docFields are the keys a documented JSON shape names: quoted
// identifiers that are not values (after ':' or '|'), or a bare
// identifier.
func docFields(text string) []string {
	if ident.MatchString(text) {
		return []string{text}
	}
	var out []string
	for _, m := range jsonKey.FindAllStringSubmatch(text, -1) {
		if m[1] == "" {
			out = append(out, m[2])
		}
	}
	return out
}

// jsonFields are the JSON names of t's fields and of every struct it
// contains, at any depth.
func jsonFields(t reflect.Type) map[string]bool {
	out := map[string]bool{}
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || seen[t] {
			return
		}
		seen[t] = true
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if f.Anonymous && name == "" {
				walk(f.Type)
				continue
			}
			if name == "" || name == "-" {
				name = f.Name
			}
			out[name] = true
			walk(f.Type)
		}
	}
	walk(t)
	return out
}

var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocLinksResolve: every relative link in the README and docs/ names
// a file of the repository (and a heading of it, for #anchors), and no
// document or code comment points outside the repository (../shared,
// spec/*.md).
func TestDocLinksResolve(t *testing.T) {
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	docs, _ := filepath.Glob(filepath.Join(repo, "docs", "*.md"))
	docs = append(docs, filepath.Join(repo, "README.md"), filepath.Join(repo, "BENCHMARKS.md"))
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repo, doc)
		if strings.Contains(string(b), "../shared") {
			t.Errorf("%s points at ../shared, which a clone does not have", rel)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			p := doc
			if file != "" {
				p = filepath.Join(filepath.Dir(doc), file)
			}
			if _, err := os.Stat(p); err != nil {
				t.Errorf("%s: link %s: %v", rel, target, err)
				continue
			}
			if anchor != "" && strings.HasSuffix(p, ".md") && !hasAnchor(t, p, anchor) {
				t.Errorf("%s: link %s: no such heading", rel, target)
			}
		}
	}
	err = filepath.WalkDir(repo, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() && (d.Name() == ".git" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if regexp.MustCompile(`(^|[^/\w])spec/\w+\.md`).Match(b) {
			rel, _ := filepath.Rel(repo, p)
			t.Errorf("%s cites spec/*.md, which a clone does not have: cite docs/ instead", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// hasAnchor reports whether the Markdown file has a heading whose GitHub
// anchor is anchor.
func hasAnchor(t *testing.T, file, anchor string) bool {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		h, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if !ok || !strings.HasPrefix(line, "#") {
			continue
		}
		var a strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				a.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
				a.WriteRune(r)
			}
		}
		if a.String() == anchor {
			return true
		}
	}
	return false
}
