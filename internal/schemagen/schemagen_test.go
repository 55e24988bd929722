package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/avfs/avfs/messages"
)

const fix = "regenerate with `go run ./internal/schemagen -out docs/schema -doc docs/protocol.md` (make schema)"

func load(t testing.TB) (root string, src *source) {
	t.Helper()
	root, err := moduleRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	src, err = readSource(filepath.Join(root, "messages"))
	if err != nil {
		t.Fatal(err)
	}
	return root, src
}

// Every Op constant declared in package messages has an entry in the op
// table, and the table names no op that messages does not declare.
func TestOpTableCoversMessages(t *testing.T) {
	_, src := load(t)
	inTable := map[string]bool{}
	for _, o := range ops {
		if inTable[string(o.Op)] {
			t.Errorf("op %s appears twice in the op table", o.Op)
		}
		inTable[string(o.Op)] = true
	}
	declared := map[string]bool{}
	for name, v := range src.ops {
		declared[v] = true
		if !inTable[v] {
			t.Errorf("messages.%s (%q) has no entry in the op table of internal/schemagen/ops.go: add its args and result types", name, v)
		}
	}
	for op := range inTable {
		if !declared[op] {
			t.Errorf("op table entry %q is not an Op constant of package messages", op)
		}
	}
}

// The committed schema files are exactly what the generator writes now.
func TestSchemaFilesUpToDate(t *testing.T) {
	root, src := load(t)
	want, err := generate(src)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "docs", "schema")
	for _, name := range sortedKeys(want) {
		got, err := os.ReadFile(filepath.Join(dir, name))
		switch {
		case err != nil:
			t.Errorf("docs/schema/%s: %v; %s", name, err, fix)
		case !bytes.Equal(got, want[name]):
			t.Errorf("docs/schema/%s differs from the Go types; %s", name, fix)
		}
	}
	present, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range present {
		if _, ok := want[filepath.Base(p)]; !ok {
			t.Errorf("docs/schema/%s is no longer generated; %s", filepath.Base(p), fix)
		}
	}
}

// The op table in docs/protocol.md is the generated one, and its error
// code table lists every code of messages.Codes() and no other.
func TestProtocolDocUpToDate(t *testing.T) {
	root, _ := load(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "protocol.md"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := block(doc)
	if err != nil {
		t.Fatalf("docs/protocol.md: %v", err)
	}
	if want := opTable("schema"); got != want {
		t.Errorf("docs/protocol.md: op table is stale; %s\ngot:\n%s\nwant:\n%s", fix, got, want)
	}
	var listed []string
	for _, line := range strings.Split(string(doc), "\n") {
		// Rows of the error code table: | `CODE` | ...
		if rest, ok := strings.CutPrefix(line, "| `"); ok {
			code, _, _ := strings.Cut(rest, "`")
			if code == strings.ToUpper(code) && !strings.Contains(code, ".") {
				listed = append(listed, code)
			}
		}
	}
	var want []string
	for _, c := range messages.Codes() {
		want = append(want, string(c))
	}
	sort.Strings(listed)
	sort.Strings(want)
	if !slices.Equal(listed, want) {
		t.Errorf("docs/protocol.md error code table lists %v, want messages.Codes() %v", listed, want)
	}
}

// The required members of every schema are exactly the members
// encoding/json writes for a zero value, so omitempty handling matches
// the encoder.
func TestRequiredMatchesEncoder(t *testing.T) {
	_, src := load(t)
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || seen[t] || t.PkgPath() != reflect.TypeFor[messages.Request]().PkgPath() {
			return
		}
		seen[t] = true
		for _, f := range fields(t) {
			walk(f.t)
		}
	}
	for _, o := range ops {
		if o.Args != nil {
			walk(o.Args)
		}
		walk(o.Result)
	}
	for _, ty := range append([]reflect.Type{reflect.TypeFor[messages.Request](), reflect.TypeFor[messages.Reply](),
		reflect.TypeFor[messages.Error](), reflect.TypeFor[messages.Envelope]()}, fleetTypes...) {
		walk(ty)
	}
	if len(seen) < 40 {
		t.Fatalf("walked %d types, want the whole contract", len(seen))
	}
	for ty := range seen {
		s, err := newBuilder(src, false).structSchema(ty)
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(reflect.New(ty).Elem().Interface())
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		var written []string
		for k := range m {
			written = append(written, k)
			if s.Properties == nil || s.Properties.vals[k] == nil {
				t.Errorf("%s: encoder writes %q, schema has no such property", ty.Name(), k)
			}
		}
		sort.Strings(written)
		required := slices.Clone(s.Required)
		sort.Strings(required)
		if !slices.Equal(required, written) {
			t.Errorf("%s: required %v, want the members a zero value encodes to: %v", ty.Name(), required, written)
		}
	}
}

// Args are decoded with DisallowUnknownFields, so their schemas are closed
// throughout; results may grow, so theirs are open.
func TestArgsClosedResultsOpen(t *testing.T) {
	_, src := load(t)
	files, err := generate(src)
	if err != nil {
		t.Fatal(err)
	}
	var objects func(v any, visit func(map[string]any))
	objects = func(v any, visit func(map[string]any)) {
		switch x := v.(type) {
		case map[string]any:
			if x["type"] == "object" || x["properties"] != nil {
				visit(x)
			}
			for _, c := range x {
				objects(c, visit)
			}
		case []any:
			for _, c := range x {
				objects(c, visit)
			}
		}
	}
	for _, o := range ops {
		check := func(name string, closed bool) {
			var doc any
			if err := json.Unmarshal(files[name], &doc); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if doc.(map[string]any)["$schema"] != Draft {
				t.Errorf("%s: $schema is not %s", name, Draft)
			}
			objects(doc, func(obj map[string]any) {
				if got := obj["additionalProperties"] == false; got != closed {
					t.Errorf("%s: object %v closed=%v, want %v", name, obj["title"], got, closed)
				}
			})
		}
		check(fileName(o.Args), true)
		check(fileName(o.Result), false)
	}
}
