package main

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// source is what the Go source of package messages says beyond its types:
// doc comments, and the declared Op constants.
type source struct {
	types  map[string]string // type name -> doc comment
	fields map[string]string // "Type.Field" -> doc or line comment
	ops    map[string]string // Op constant name -> value
}

// moduleRoot walks up from dir to the directory holding go.mod.
func moduleRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// readSource parses the non-test Go files of package messages in dir.
func readSource(dir string) (*source, error) {
	fset := token.NewFileSet()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	src := &source{types: map[string]string{}, fields: map[string]string{}, ops: map[string]string{}}
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		if f.Name.Name != "messages" {
			return nil, fmt.Errorf("%s: package %s, want messages", p, f.Name.Name)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			switch gd.Tok {
			case token.TYPE:
				src.addTypes(gd)
			case token.CONST:
				if err := src.addOps(gd); err != nil {
					return nil, fmt.Errorf("%s: %w", p, err)
				}
			}
		}
	}
	if len(src.ops) == 0 {
		return nil, fmt.Errorf("%s: no Op constants found", dir)
	}
	return src, nil
}

func (s *source) addTypes(gd *ast.GenDecl) {
	for _, sp := range gd.Specs {
		ts := sp.(*ast.TypeSpec)
		doc := ts.Doc
		if doc == nil && len(gd.Specs) == 1 {
			doc = gd.Doc
		}
		s.types[ts.Name.Name] = text(doc)
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			continue
		}
		for _, f := range st.Fields.List {
			c := text(f.Doc)
			if lc := text(f.Comment); lc != "" {
				c = strings.TrimSpace(c + " " + lc)
			}
			for _, n := range f.Names {
				s.fields[ts.Name.Name+"."+n.Name] = c
			}
		}
	}
}

// addOps records the constants of type Op, including those that take the
// type implicitly from the spec above them in a group.
func (s *source) addOps(gd *ast.GenDecl) error {
	var typ ast.Expr
	for _, sp := range gd.Specs {
		vs := sp.(*ast.ValueSpec)
		if vs.Type != nil || len(vs.Values) > 0 {
			typ = vs.Type
		}
		id, ok := typ.(*ast.Ident)
		if !ok || id.Name != "Op" {
			continue
		}
		for i, n := range vs.Names {
			if i >= len(vs.Values) {
				return fmt.Errorf("op constant %s: want an explicit string value", n.Name)
			}
			lit, ok := vs.Values[i].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return fmt.Errorf("op constant %s: want a string literal", n.Name)
			}
			v, err := strconv.Unquote(lit.Value)
			if err != nil {
				return err
			}
			s.ops[n.Name] = v
		}
	}
	return nil
}

// text is a comment as one line of prose.
func text(cg *ast.CommentGroup) string {
	if cg == nil {
		return ""
	}
	return strings.Join(strings.Fields(cg.Text()), " ")
}
