package textdiff

import (
	"errors"
	"strings"
)

// Favor says how Merge resolves a conflicting hunk: not at all
// (FavorNone: the hunk is counted and the merged text keeps ours), with
// ours or with theirs.
type Favor int

// Ways to resolve a conflicting hunk.
const (
	FavorNone Favor = iota
	FavorOurs
	FavorTheirs
)

// hunk replaces base lines [start, end) with lines.
type hunk struct {
	start, end int
	lines      []string
}

// hunks turns the edit script from base to x into the base ranges it
// replaces.
func hunks(ops []Op) []hunk {
	var out []hunk
	bi := 0
	for k := 0; k < len(ops); {
		if ops[k].Kind == ' ' {
			bi++
			k++
			continue
		}
		h := hunk{start: bi, end: bi}
		for ; k < len(ops) && ops[k].Kind != ' '; k++ {
			if ops[k].Kind == '-' {
				h.end++
				bi++
			} else {
				h.lines = append(h.lines, ops[k].Line)
			}
		}
		out = append(out, h)
	}
	return out
}

// apply returns base[lo:hi] with hs (all inside [lo, hi], sorted) applied.
func apply(base []string, lo, hi int, hs []hunk) []string {
	var out []string
	at := lo
	for _, h := range hs {
		out = append(out, base[at:h.start]...)
		out = append(out, h.lines...)
		at = h.end
	}
	return append(out, base[at:hi]...)
}

// Merge merges the changes from base to ours and from base to theirs
// line by line, as diff3 does: a change made on one side only is taken,
// the same change made on both sides is taken once, and changes that
// overlap or touch in base (two insertions at one place included) make a
// conflicting hunk, resolved as favor says. It returns the merged text
// and the number of conflicting hunks; with FavorNone and conflicts > 0
// the text keeps ours in each conflicting hunk. It fails with
// ErrTooLarge as Script does.
func Merge(base, ours, theirs []byte, favor Favor) (merged []byte, conflicts int, err error) {
	b := Lines(base)
	so, err := Script(b, Lines(ours))
	if err != nil {
		return nil, 0, err
	}
	st, err := Script(b, Lines(theirs))
	if err != nil {
		return nil, 0, err
	}
	ho, ht := hunks(so), hunks(st)
	var out strings.Builder
	at := 0 // base lines before at are written
	i, j := 0, 0
	for i < len(ho) || j < len(ht) {
		// A group starts with the hunk that starts first and takes every
		// hunk of either side that overlaps or touches it, transitively.
		lo := 0
		switch {
		case j == len(ht) || (i < len(ho) && ho[i].start <= ht[j].start):
			lo = ho[i].start
		default:
			lo = ht[j].start
		}
		hi := lo
		gi, gj := i, j
		for {
			grew := false
			if i < len(ho) && ho[i].start <= hi {
				hi = max(hi, ho[i].end)
				i++
				grew = true
			}
			if j < len(ht) && ht[j].start <= hi {
				hi = max(hi, ht[j].end)
				j++
				grew = true
			}
			if !grew {
				break
			}
		}
		for _, l := range b[at:lo] {
			out.WriteString(l)
		}
		at = hi
		mo, mt := ho[gi:i], ht[gj:j]
		var take []string
		switch {
		case len(mt) == 0:
			take = apply(b, lo, hi, mo)
		case len(mo) == 0:
			take = apply(b, lo, hi, mt)
		default:
			a, t := apply(b, lo, hi, mo), apply(b, lo, hi, mt)
			switch {
			case strings.Join(a, "") == strings.Join(t, ""):
				take = a
			case favor == FavorTheirs:
				take = t
			default:
				if favor == FavorNone {
					conflicts++
				}
				take = a
			}
		}
		for _, l := range take {
			out.WriteString(l)
		}
	}
	for _, l := range b[at:] {
		out.WriteString(l)
	}
	return []byte(out.String()), conflicts, nil
}

// ErrBinary is MergeText's error for content that is not text.
var ErrBinary = errors.New("binary content")

// MergeText is Merge with the favor named as merge strategies are ("",
// "ours", "theirs"), refusing binary content (Binary) with ErrBinary:
// the line merge vault.Merge is given.
func MergeText(base, ours, theirs []byte, favor string) ([]byte, int, error) {
	if Binary(base) || Binary(ours) || Binary(theirs) {
		return nil, 0, ErrBinary
	}
	f := FavorNone
	switch favor {
	case "ours":
		f = FavorOurs
	case "theirs":
		f = FavorTheirs
	}
	return Merge(base, ours, theirs, f)
}
