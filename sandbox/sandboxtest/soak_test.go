package sandboxtest_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

// TestSoakLocalNamespace runs the soak (issue 17's "nothing lost, nothing
// left running") on the local backend's namespace tier: 20 sandboxes for
// 40 s, then no cgroup and no temporary directory of theirs may be left.
func TestSoakLocalNamespace(t *testing.T) {
	sandboxtest.RunSoak(t, localFactory(t, "namespace", sandbox.RequireIsolation(sandbox.TierNamespace)),
		sandboxtest.SoakOptions{Leftovers: localLeftovers})
}

// localLeftovers lists the cgroup directories and temporary directories
// named after one of ids.
func localLeftovers(ids []string) []string {
	var out []string
	named := func(name string) bool {
		for _, id := range ids {
			if id != "" && strings.Contains(name, id) {
				return true
			}
		}
		return false
	}
	// The sandboxes' cgroups sit a few levels below each hierarchy's root
	// (under this process's own cgroup).
	_ = filepath.WalkDir("/sys/fs/cgroup", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if strings.Count(p, "/") > 9 {
			return filepath.SkipDir
		}
		if named(d.Name()) {
			out = append(out, "cgroup "+p)
			return filepath.SkipDir
		}
		return nil
	})
	deadline := time.Now().Add(5 * time.Second)
	for {
		var tmp []string
		ents, _ := os.ReadDir(os.TempDir())
		for _, e := range ents {
			if named(e.Name()) {
				tmp = append(tmp, "temporary directory "+filepath.Join(os.TempDir(), e.Name()))
			}
		}
		if len(tmp) == 0 || time.Now().After(deadline) {
			return append(out, tmp...)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
