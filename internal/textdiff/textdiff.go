// Package textdiff compares texts line by line: a unified diff from the
// longest common subsequence of their lines, and a check for binary
// content. It holds no state and imports nothing of avfs.
package textdiff

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxCells bounds the LCS table (lines of a × lines of b, after the common
// head and tail are set aside): 16 Mi cells, 64 MiB.
const MaxCells = 16 << 20

// ErrTooLarge is returned when two texts differ in too many lines for the
// LCS table.
var ErrTooLarge = errors.New("texts too large to diff")

// Binary reports whether data looks like binary content: a NUL byte in its
// first 8000 bytes (as git decides) or invalid UTF-8.
func Binary(data []byte) bool {
	head := data[:min(len(data), 8000)]
	return bytes.IndexByte(head, 0) >= 0 || !utf8.Valid(data)
}

// Lines splits text into lines, each keeping its newline; a last line
// without one is a line too.
func Lines(text []byte) []string {
	var out []string
	for len(text) > 0 {
		i := bytes.IndexByte(text, '\n')
		if i < 0 {
			out = append(out, string(text))
			break
		}
		out = append(out, string(text[:i+1]))
		text = text[i+1:]
	}
	return out
}

// Op is one line of an edit script.
type Op struct {
	Kind byte   // ' ' kept, '-' only in a, '+' only in b
	Line string // with its newline, if it had one
}

// Script returns the edit script that turns a into b, keeping a longest
// common subsequence of lines.
func Script(a, b []string) ([]Op, error) {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	ma, mb := a[pre:len(a)-suf], b[pre:len(b)-suf]
	n, m := len(ma), len(mb)
	if (n+1)*(m+1) > MaxCells {
		return nil, fmt.Errorf("%d × %d changed lines: %w", n, m, ErrTooLarge)
	}
	// l[i][j] = LCS length of ma[i:] and mb[j:].
	w := m + 1
	l := make([]int32, (n+1)*w)
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if ma[i] == mb[j] {
				l[i*w+j] = l[(i+1)*w+j+1] + 1
			} else {
				l[i*w+j] = max(l[(i+1)*w+j], l[i*w+j+1])
			}
		}
	}
	ops := make([]Op, 0, len(a)+m)
	for _, s := range a[:pre] {
		ops = append(ops, Op{' ', s})
	}
	i, j := 0, 0
	for i < n && j < m {
		switch {
		case ma[i] == mb[j]:
			ops = append(ops, Op{' ', ma[i]})
			i, j = i+1, j+1
		case l[(i+1)*w+j] >= l[i*w+j+1]:
			ops = append(ops, Op{'-', ma[i]})
			i++
		default:
			ops = append(ops, Op{'+', mb[j]})
			j++
		}
	}
	for ; i < n; i++ {
		ops = append(ops, Op{'-', ma[i]})
	}
	for ; j < m; j++ {
		ops = append(ops, Op{'+', mb[j]})
	}
	for _, s := range a[len(a)-suf:] {
		ops = append(ops, Op{' ', s})
	}
	return ops, nil
}

// Unified returns the unified diff (3 lines of context) that turns a into
// b, with the file labels from and to; "" when they are equal.
func Unified(from, to string, a, b []byte) (string, error) {
	ops, err := Script(Lines(a), Lines(b))
	if err != nil {
		return "", err
	}
	const ctx = 3
	var out strings.Builder
	// Hunks: runs of changes with up to 2*ctx kept lines between them.
	type pos struct{ op, a, b int }
	var at []pos // position of each op in a and b
	ai, bi := 0, 0
	for k, o := range ops {
		at = append(at, pos{k, ai, bi})
		if o.Kind != '+' {
			ai++
		}
		if o.Kind != '-' {
			bi++
		}
	}
	k := 0
	for k < len(ops) {
		for k < len(ops) && ops[k].Kind == ' ' {
			k++
		}
		if k == len(ops) {
			break
		}
		start := max(0, k-ctx)
		end := k
		for end < len(ops) {
			if ops[end].Kind != ' ' {
				end++
				continue
			}
			run := end
			for run < len(ops) && ops[run].Kind == ' ' {
				run++
			}
			if run == len(ops) || run-end > 2*ctx {
				end = min(run, end+ctx)
				break
			}
			end = run
		}
		if out.Len() == 0 {
			fmt.Fprintf(&out, "--- %s\n+++ %s\n", from, to)
		}
		na, nb := 0, 0
		for _, o := range ops[start:end] {
			if o.Kind != '+' {
				na++
			}
			if o.Kind != '-' {
				nb++
			}
		}
		fmt.Fprintf(&out, "@@ -%s +%s @@\n", span(at[start].a, na), span(at[start].b, nb))
		for _, o := range ops[start:end] {
			out.WriteByte(o.Kind)
			out.WriteString(o.Line)
			if !strings.HasSuffix(o.Line, "\n") {
				out.WriteString("\n\\ No newline at end of file\n")
			}
		}
		k = end
	}
	return out.String(), nil
}

// span is a hunk range as diff writes it: 1-based start and count, with
// an empty range starting at the line before.
func span(start, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", start)
	}
	if n == 1 {
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}
