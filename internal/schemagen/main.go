package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	"github.com/avfs/avfs/messages"
)

func main() {
	out := flag.String("out", "docs/schema", "directory to write the schema files to (stale *.json files there are removed)")
	doc := flag.String("doc", "", "markdown file whose generated op table to rewrite (e.g. docs/protocol.md); empty: leave docs alone")
	src := flag.String("messages", "", "directory of package messages' source (default: messages/ under the module root)")
	flag.Parse()
	if err := run(*out, *doc, *src); err != nil {
		fmt.Fprintln(os.Stderr, "schemagen:", err)
		os.Exit(1)
	}
}

func run(out, doc, srcDir string) error {
	if srcDir == "" {
		root, err := moduleRoot(".")
		if err != nil {
			return err
		}
		srcDir = filepath.Join(root, "messages")
	}
	src, err := readSource(srcDir)
	if err != nil {
		return err
	}
	files, err := generate(src)
	if err != nil {
		return err
	}
	if err := writeDir(out, files); err != nil {
		return err
	}
	if doc == "" {
		return nil
	}
	rel, err := filepath.Rel(filepath.Dir(doc), out)
	if err != nil {
		return err
	}
	old, err := os.ReadFile(doc)
	if err != nil {
		return err
	}
	updated, err := replaceBlock(old, opTable(filepath.ToSlash(rel)))
	if err != nil {
		return fmt.Errorf("%s: %w", doc, err)
	}
	if bytes.Equal(old, updated) {
		return nil
	}
	return os.WriteFile(doc, updated, 0o644)
}

// writeDir writes files into dir and removes the *.json files there that
// are no longer generated, so a renamed type leaves no stale schema.
func writeDir(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	existing, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return err
	}
	for _, p := range existing {
		if _, keep := files[filepath.Base(p)]; !keep {
			if err := os.Remove(p); err != nil {
				return err
			}
		}
	}
	for name, b := range files {
		p := filepath.Join(dir, name)
		if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, b) {
			continue
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// fileName is the schema file of a root type.
func fileName(t reflect.Type) string {
	if t == nil {
		return noArgs + ".schema.json"
	}
	return typeName(t) + ".schema.json"
}

// generate returns every file of the schema directory by name.
func generate(src *source) (map[string][]byte, error) {
	files := map[string][]byte{}
	strictness := map[string]bool{}
	add := func(t reflect.Type, strict bool) error {
		name := fileName(t)
		if s, seen := strictness[name]; seen {
			if s != strict {
				return fmt.Errorf("%s is both an args and a result type; give it its own file", t)
			}
			return nil
		}
		strictness[name] = strict
		s, err := newBuilder(src, strict).file(t)
		if err != nil {
			return err
		}
		return put(files, name, s)
	}
	seen := map[messages.Op]bool{}
	for _, o := range ops {
		if seen[o.Op] {
			return nil, fmt.Errorf("op %s appears twice in the op table", o.Op)
		}
		seen[o.Op] = true
		if o.Result == nil {
			return nil, fmt.Errorf("op %s has no result type", o.Op)
		}
		if o.Args != nil {
			if err := add(o.Args, true); err != nil {
				return nil, err
			}
		}
		if err := add(o.Result, false); err != nil {
			return nil, err
		}
	}
	for _, t := range []reflect.Type{typ[messages.Request](), typ[messages.Reply](), typ[messages.Error](), typ[messages.Envelope](), typ[messages.OutputChunk]()} {
		if err := add(t, false); err != nil {
			return nil, err
		}
	}
	for _, t := range fleetTypes {
		if err := add(t, false); err != nil {
			return nil, err
		}
	}
	if err := put(files, noArgs+".schema.json", &Schema{
		Dialect: Draft, Title: noArgs,
		Description: "The args of an op that takes none: omit args, or send null or {}. Any member is refused (INVALID_ARGUMENT).",
		Type:        []string{"object", "null"}, AdditionalProperties: false,
	}); err != nil {
		return nil, err
	}
	code := codeEnum()
	code.Dialect, code.Title, code.Description = Draft, "Code", src.types["Code"]
	if err := put(files, "Code.schema.json", code); err != nil {
		return nil, err
	}
	op := newBuilder(src, false).opEnum()
	op.Dialect, op.Title, op.Description = Draft, "Op", src.types["Op"]
	if err := put(files, "Op.schema.json", op); err != nil {
		return nil, err
	}
	idx, err := marshalIndent(index())
	if err != nil {
		return nil, err
	}
	files["ops.json"] = idx
	return files, nil
}

func put(files map[string][]byte, name string, s *Schema) error {
	b, err := marshalIndent(s)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	files[name] = b
	return nil
}

// marshalIndent is the files' encoding: two-space indent, final newline.
func marshalIndent(v any) ([]byte, error) {
	b, err := marshal(v)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// opIndex is ops.json: the op table for programs.
type opIndex struct {
	Comment string     `json:"$comment"`
	Version string     `json:"version"`
	Subject string     `json:"subject"`
	NoVault string     `json:"no_vault_token"`
	Ops     []opRecord `json:"ops"`
}

type opRecord struct {
	Op       string `json:"op"`
	Scope    string `json:"scope"`
	Subject  string `json:"subject"`
	Mutating bool   `json:"mutating"`
	Args     string `json:"args"`
	Result   string `json:"result"`
}

func index() opIndex {
	x := opIndex{
		Comment: "Generated by go run ./internal/schemagen; do not edit. Scope: vault = the vault token names an existing vault; new vault = it names the vault to create; namespace = the token is _.",
		Version: messages.Version,
		Subject: messages.SubjectRequest + ".<namespace>.<vault>.<op>",
		NoVault: messages.NoVault,
	}
	for _, o := range ops {
		x.Ops = append(x.Ops, opRecord{
			Op: string(o.Op), Scope: scope(o.Op),
			Subject:  messages.SubjectRequest + ".<namespace>." + vaultToken(o.Op) + "." + string(o.Op),
			Mutating: o.Op.Mutating(), Args: fileName(o.Args), Result: fileName(o.Result),
		})
	}
	return x
}

// Markers around the generated op table in the protocol document.
const (
	beginOps = "<!-- BEGIN GENERATED op table: go run ./internal/schemagen -doc docs/protocol.md; do not edit -->"
	endOps   = "<!-- END GENERATED op table -->"
)

// opTable renders the op table in markdown; links point into dir.
func opTable(dir string) string {
	var b strings.Builder
	b.WriteString("| op | vault token | scope | args | result | mutating |\n|---|---|---|---|---|---|\n")
	link := func(t reflect.Type) string {
		n := fileName(t)
		return fmt.Sprintf("[%s](%s/%s)", strings.TrimSuffix(n, ".schema.json"), dir, n)
	}
	for _, o := range ops {
		mut := "no"
		if o.Op.Mutating() {
			mut = "yes"
		}
		fmt.Fprintf(&b, "| `%s` | `%s` | %s | %s | %s | %s |\n", o.Op, vaultToken(o.Op), scope(o.Op), link(o.Args), link(o.Result), mut)
	}
	return b.String()
}

// replaceBlock puts table between the markers of doc.
func replaceBlock(doc []byte, table string) ([]byte, error) {
	s := string(doc)
	i := strings.Index(s, beginOps)
	j := strings.Index(s, endOps)
	if i < 0 || j < i {
		return nil, errors.New("no generated op table markers")
	}
	head := s[:i+len(beginOps)]
	return []byte(head + "\n" + table + s[j:]), nil
}

// block returns what doc holds between the markers.
func block(doc []byte) (string, error) {
	s := string(doc)
	i := strings.Index(s, beginOps)
	j := strings.Index(s, endOps)
	if i < 0 || j < i {
		return "", errors.New("no generated op table markers")
	}
	return strings.TrimPrefix(s[i+len(beginOps):j], "\n"), nil
}

// sortedKeys lists a file map's names in order.
func sortedKeys(m map[string][]byte) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
