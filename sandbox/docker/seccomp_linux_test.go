package docker

import (
	"encoding/json"
	"flag"
	"os"
	"slices"
	"testing"

	"github.com/moby/profiles/seccomp"
)

var updateSeccomp = flag.Bool("update-seccomp", false, "rewrite seccomp_profile.json from the moby/profiles default")

// TestSeccompProfileFileIsCurrent checks that the profile the backend sends
// (seccomp_profile.json, embedded so that macOS and Windows hosts can send
// it too) is the moby/profiles default of the release in go.mod without
// deniedSyscalls: a dependency update or an edit of deniedSyscalls that
// forgot to regenerate the file fails here.
func TestSeccompProfileFileIsCurrent(t *testing.T) {
	p := seccomp.DefaultProfile()
	for _, sc := range p.Syscalls {
		sc.Names = slices.DeleteFunc(sc.Names, func(n string) bool { return slices.Contains(deniedSyscalls, n) })
	}
	p.Syscalls = slices.DeleteFunc(p.Syscalls, func(sc *seccomp.Syscall) bool { return len(sc.Names) == 0 && sc.Name == "" })
	want, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if *updateSeccomp {
		if err := os.WriteFile("seccomp_profile.json", want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := seccompProfile()
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatal("seccomp_profile.json is stale: run go test ./sandbox/docker -run TestSeccompProfileFileIsCurrent -update-seccomp")
	}
	var prof seccomp.Seccomp
	if err := json.Unmarshal([]byte(got), &prof); err != nil {
		t.Fatal(err)
	}
	for _, n := range deniedSyscalls {
		for _, sc := range prof.Syscalls {
			if slices.Contains(sc.Names, n) {
				t.Fatalf("the profile allows %s", n)
			}
		}
	}
}
