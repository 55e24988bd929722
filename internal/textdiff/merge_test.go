package textdiff

import (
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestMergeCases(t *testing.T) {
	base := "a\nb\nc\nd\ne\nf\ng\n"
	for _, c := range []struct {
		name, ours, theirs, want string
		conflicts                int
		favor                    Favor
	}{
		{name: "apart", ours: "A\nb\nc\nd\ne\nf\ng\n", theirs: "a\nb\nc\nd\ne\nf\nG\n", want: "A\nb\nc\nd\ne\nf\nG\n"},
		{name: "same change", ours: "a\nB\nc\nd\ne\nf\ng\n", theirs: "a\nB\nc\nd\ne\nf\ng\n", want: "a\nB\nc\nd\ne\nf\ng\n"},
		{name: "insert and delete", ours: "a\nb\nx\nc\nd\ne\nf\ng\n", theirs: "a\nb\nc\nd\nf\ng\n", want: "a\nb\nx\nc\nd\nf\ng\n"},
		{name: "overlap", ours: "a\nb\nO\nd\ne\nf\ng\n", theirs: "a\nb\nT\nd\ne\nf\ng\n", want: "a\nb\nO\nd\ne\nf\ng\n", conflicts: 1},
		{name: "overlap theirs", ours: "a\nb\nO\nd\ne\nf\ng\n", theirs: "a\nb\nT\nd\ne\nf\ng\n", want: "a\nb\nT\nd\ne\nf\ng\n", favor: FavorTheirs},
		{name: "overlap ours, rest merged", ours: "a\nb\nO\nd\ne\nf\ng\n", theirs: "a\nb\nT\nd\ne\nf\nG\n", want: "a\nb\nO\nd\ne\nf\nG\n", favor: FavorOurs},
		{name: "both append", ours: base + "o\n", theirs: base + "t\n", want: base + "o\n", conflicts: 1},
		{name: "two conflicts", ours: "1\nb\nc\nd\ne\nf\n7\n", theirs: "x\nb\nc\nd\ne\nf\ny\n", want: "1\nb\nc\nd\ne\nf\n7\n", conflicts: 2},
		{name: "no newline at end", ours: "A\nb\nc\nd\ne\nf\ng", theirs: "a\nb\nc\nd\ne\nf\ng\n", want: "A\nb\nc\nd\ne\nf\ng"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, n, err := Merge([]byte(base), []byte(c.ours), []byte(c.theirs), c.favor)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want || n != c.conflicts {
				t.Fatalf("merged %q with %d conflicts, want %q with %d", got, n, c.want, c.conflicts)
			}
		})
	}
}

// TestMergeProperties: a side that did not change takes the other side's
// text; the same change on both sides is that change; and changes made
// far apart (one side edits the first half, the other the second half,
// separated by a line neither touches) merge without a conflict into
// the text holding both.
func TestMergeProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		line := rapid.SampledFrom([]string{"a\n", "b\n", "c\n", "d\n", "e"})
		text := func(label string) []string { return rapid.SliceOfN(line, 0, 12).Draw(t, label) }
		join := func(ls []string) []byte { return []byte(strings.Join(ls, "")) }
		fix := func(ls []string) []string { // only a last line may lack its newline
			for i := range ls[:max(0, len(ls)-1)] {
				if !strings.HasSuffix(ls[i], "\n") {
					ls[i] += "\n"
				}
			}
			return ls
		}
		base, x := fix(text("base")), fix(text("x"))
		for _, c := range [][3][]string{{base, x, base}, {base, base, x}, {base, x, x}} {
			got, n, err := Merge(join(c[0]), join(c[1]), join(c[2]), FavorNone)
			if err != nil || n != 0 || string(got) != string(join(x)) {
				t.Fatalf("merge(%q, %q, %q) = %q, %d, %v; want %q, 0", join(c[0]), join(c[1]), join(c[2]), got, n, err, join(x))
			}
		}
		head, tail := fix(text("head")), fix(text("tail"))
		h2, t2 := fix(text("head2")), fix(text("tail2"))
		mid := []string{"MIDDLE\n"}
		fixTail := func(ls []string) []string {
			if len(ls) > 0 && !strings.HasSuffix(ls[len(ls)-1], "\n") {
				ls[len(ls)-1] += "\n"
			}
			return ls
		}
		head, h2 = fixTail(head), fixTail(h2)
		b := join(append(append(append([]string{}, head...), mid...), tail...))
		o := join(append(append(append([]string{}, h2...), mid...), tail...))
		th := join(append(append(append([]string{}, head...), mid...), t2...))
		want := join(append(append(append([]string{}, h2...), mid...), t2...))
		got, n, err := Merge(b, o, th, FavorNone)
		if err != nil || n != 0 || string(got) != string(want) {
			t.Fatalf("merge(%q, %q, %q) = %q, %d, %v; want %q, 0", b, o, th, got, n, err, want)
		}
	})
}
