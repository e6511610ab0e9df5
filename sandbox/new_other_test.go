//go:build !linux

package sandbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

// Where the local backend cannot isolate (macOS, Windows), New without
// WithDriver refuses with SBX_ISOLATION_UNAVAILABLE and names the Docker
// backend as the way forward; it never runs commands unconfined.
func TestNewOffLinuxNamesTheDockerBackend(t *testing.T) {
	sb, err := sandbox.New(context.Background())
	if err == nil {
		sb.Close()
		t.Fatal("sandbox.New without WithDriver succeeded off Linux")
	}
	var se *sandbox.Error
	if !errors.As(err, &se) || se.Code != sandbox.CodeIsolationUnavailable || !strings.Contains(err.Error(), "Docker backend") {
		t.Fatalf("sandbox.New: %v; want %s naming the Docker backend", err, sandbox.CodeIsolationUnavailable)
	}
}
