package exec_test

import (
	"slices"
	"testing"

	"github.com/avfs/avfs/exec"
)

func TestBuildEnvFiltersAndOverrides(t *testing.T) {
	host := []string{
		"PATH=/usr/bin",
		"HOME=/root",
		"SECRET_TOKEN=hunter2",
		"LC_ALL=C",
		"LC_TIME=en_GB",
		"LANG=en_US",
		"LANG=C.UTF-8", // a later duplicate wins, as in os/exec
		"LCX=no",       // "LC_*" is a prefix match, not a substring one
		"garbage",
		"=weird",
	}
	set := map[string]string{"HOME": "/vault", "LANG": "fr_FR", "BAD=NAME": "x", "": "x"}
	got := exec.BuildEnv([]string{"PATH", "LANG", "LC_*"}, host, set)
	want := []string{"HOME=/vault", "LANG=fr_FR", "LC_ALL=C", "LC_TIME=en_GB", "PATH=/usr/bin"}
	if !slices.Equal(got, want) {
		t.Fatalf("BuildEnv = %q, want %q", got, want)
	}
}

func TestBuildEnvKeepsEmptyValuesAndEquals(t *testing.T) {
	got := exec.BuildEnv([]string{"A", "B"}, []string{"A=", "B=x=y"}, nil)
	want := []string{"A=", "B=x=y"}
	if !slices.Equal(got, want) {
		t.Fatalf("BuildEnv = %q, want %q", got, want)
	}
}

func TestBuildEnvNothingAllowed(t *testing.T) {
	got := exec.BuildEnv(nil, []string{"PATH=/bin", "HOME=/root"}, nil)
	if len(got) != 0 {
		t.Fatalf("BuildEnv = %q, want empty", got)
	}
}

func TestDefaultEnvAllowIsFresh(t *testing.T) {
	a := exec.DefaultEnvAllow()
	if !slices.Contains(a, "PATH") || !slices.Contains(a, "LC_*") || slices.Contains(a, "HOME") {
		t.Fatalf("DefaultEnvAllow() = %q, want PATH and LC_* but not HOME", a)
	}
	a[0] = "HOME"
	if b := exec.DefaultEnvAllow(); b[0] != "PATH" {
		t.Fatalf("DefaultEnvAllow()[0] = %q after mutating an earlier result, want PATH", b[0])
	}
}
