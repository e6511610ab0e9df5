package agentbuild

import (
	"context"
	"debug/elf"
	"runtime"
	"testing"
	"time"
)

// The agent a container backend copies in is a static Linux binary for
// the ENGINE's architecture, whatever the host runs: built here for the
// architecture this machine is not (a Mac on arm64 driving an amd64
// engine, and the other way round).
func TestBuildIsAStaticLinuxBinaryForTheEnginesArch(t *testing.T) {
	goarch, machine := "arm64", elf.EM_AARCH64
	if runtime.GOARCH == "arm64" {
		goarch, machine = "amd64", elf.EM_X86_64
	}
	path, err := Build(context.Background(), goarch, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("the agent built for linux/%s is not a Linux ELF binary: %v", goarch, err)
	}
	defer f.Close()
	if f.Machine != machine {
		t.Errorf("the agent built for linux/%s is for %v", goarch, f.Machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the agent built for linux/%s is dynamically linked (it would not run in an arbitrary image)", goarch)
		}
	}
}
