package sandboxtest

import (
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

// platformDifference is a file semantics the contract promises as Linux
// has it, which a workspace gets from the file system under it. Every
// backend on Linux, and a container's own file system on any host, has
// Linux's; a backend that serves a directory of a macOS or Windows host
// (the fake sandbox there) has the host's, and a case relying on one of
// these is marked there, with the reason, instead of failing or passing by
// accident.
type platformDifference struct {
	what   string   // the semantics, as the skip message names it
	goos   []string // the hosts whose file systems differ
	reason string
}

var (
	diffSymlinks = platformDifference{"symbolic links", []string{"windows"},
		"making one needs the create-symbolic-link privilege (Developer Mode or an administrator), and NTFS links are typed as file or directory links"}
	diffPermissions = platformDifference{"permission bits", []string{"windows"},
		"Windows keeps a read-only flag, not permission bits: a mode reads back as 0666 or 0444, and no file is executable by its mode"}
	diffCaseFolding = platformDifference{"case-sensitive names", []string{"darwin", "windows"},
		"the hosts' default file systems (APFS, NTFS) fold case: README.md and readme.md name one file"}
)

// hostDiffers returns the skip message for a case relying on d, when the
// workspace is hostWorkspace (Info().HostWorkspace, "" when it is not a
// directory of this host) on a host goos; "" when the case applies.
func hostDiffers(goos, hostWorkspace string, d platformDifference) string {
	if hostWorkspace == "" || !slices.Contains(d.goos, goos) {
		return ""
	}
	return "platform difference (" + goos + ", " + d.what + "): " + d.reason
}

// reliesOn marks the subtest as relying on Linux's semantics for each of
// ds: where the workspace is a directory of a host that differs, the
// subtest ends there as skipped with a message starting "platform
// difference", which names the semantics and why.
func (b *box) reliesOn(ds ...platformDifference) {
	b.t.Helper()
	var msgs []string
	for _, d := range ds {
		if m := hostDiffers(runtime.GOOS, b.sb.Info().HostWorkspace, d); m != "" {
			msgs = append(msgs, m)
		}
	}
	if len(msgs) > 0 {
		b.t.Skip(strings.Join(msgs, "; "))
	}
}

// testFileNamesAreCaseSensitive: names that differ only in case are two
// files, as on Linux.
func testFileNamesAreCaseSensitive(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	b.reliesOn(diffCaseFolding)
	b.write("README.md", "upper")
	b.write("readme.md", "lower")
	if b.read("README.md") != "upper" || b.read("readme.md") != "lower" {
		t.Fatalf("README.md holds %q and readme.md %q: the names fold to one file", b.read("README.md"), b.read("readme.md"))
	}
	l, err := b.sb.Files.List(b.ctx(), "", sandbox.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := paths(l.Entries); !slices.Equal(got, []string{"README.md", "readme.md"}) {
		t.Fatalf("List: %v, want both names", got)
	}
}
