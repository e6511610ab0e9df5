package main

import (
	"os/exec"
	"strings"
	"testing"
)

// doctor reports the Docker engine the docker backend would use: whether
// it answers (and why not), its version, its runtimes with their tiers,
// and whether the default image is there. An engine that is not there is
// a report, not a failure of doctor.
func TestDoctorReportsTheDockerEngine(t *testing.T) {
	t.Run("an engine that answers", func(t *testing.T) {
		out, err := exec.Command("docker", "version", "--format", "{{.Server.Version}}").Output()
		if err != nil {
			requireOrSkip(t, "docker", "no Docker engine answers `docker version`: "+err.Error())
		}
		version := strings.TrimSpace(string(out))
		r := runBinary(t, "", "doctor")
		for _, want := range []string{
			"docker engine    yes  ",
			"Docker " + version + " (API ",
			"docker runtimes  ",
			"runc (container tier",
			"docker image     ",
			"python:3.12-slim",
		} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("doctor's report lacks %q:\n%s", want, r.stdout)
			}
		}
	})
	t.Run("no engine", func(t *testing.T) {
		t.Setenv("DOCKER_HOST", "unix://"+t.TempDir()+"/docker.sock")
		r := runBinary(t, "", "doctor")
		if !strings.Contains(r.stdout, "docker engine    no   ") || !strings.Contains(r.stdout, "cannot reach the Docker engine") {
			t.Errorf("doctor with no engine says:\n%s", r.stdout)
		}
		if strings.Contains(r.stdout, "docker runtimes") {
			t.Errorf("doctor reports runtimes of an engine that did not answer:\n%s", r.stdout)
		}
		if r.code != 0 && strings.Contains(r.stdout, "sandbox.New      picks ") {
			t.Errorf("a missing Docker engine changed doctor's exit code to %d", r.code)
		}
	})
}
