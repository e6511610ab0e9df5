//go:build !linux

package local_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
	"github.com/sandboxkit/sandboxkit/sandbox/local"
)

// Off Linux the local backend refuses to start and names the way forward.
func TestStartOffLinuxNamesDocker(t *testing.T) {
	_, err := local.New().Start(context.Background(), driver.Config{ID: "t"})
	var de *driver.Error
	if err == nil || !errors.As(err, &de) || de.Code != driver.CodeIsolationUnavailable || !strings.Contains(err.Error(), "Docker backend") {
		t.Fatalf("Start: %v; want ISOLATION_UNAVAILABLE naming the Docker backend", err)
	}
}
