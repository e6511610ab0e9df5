package docker

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/docker/docker/api/types/image"

	"github.com/sandboxkit/sandboxkit/sandbox/agent"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// fakeRegistry serves one image, built here, over the registry HTTP API on
// this machine's loopback (the engine treats 127.0.0.0/8 registries as
// plain HTTP), so a real pull runs without any traffic leaving the host.
// The image holds a single text file: no shell, no libc, no python.
func fakeRegistry(t *testing.T, repo, tag string) *httptest.Server {
	t.Helper()
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	content := []byte("a file and nothing else\n")
	if err := tw.WriteHeader(&tar.Header{Name: "hello.txt", Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	tw.Write(content)
	tw.Close()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(layer.Bytes())
	zw.Close()
	digest := func(b []byte) string { s := sha256.Sum256(b); return "sha256:" + hex.EncodeToString(s[:]) }
	config, _ := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH, "os": "linux",
		"config": map[string]any{"Env": []string{"PATH=/bin"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{digest(layer.Bytes())}},
	})
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.docker.distribution.manifest.v2+json",
		"config":        map[string]any{"mediaType": "application/vnd.docker.container.image.v1+json", "size": len(config), "digest": digest(config)},
		"layers":        []any{map[string]any{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "size": gz.Len(), "digest": digest(gz.Bytes())}},
	})
	blobs := map[string][]byte{digest(config): config, digest(gz.Bytes()): gz.Bytes()}
	var mu sync.Mutex
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch p := r.URL.Path; {
		case p == "/v2/":
			w.WriteHeader(http.StatusOK)
		case p == fmt.Sprintf("/v2/%s/manifests/%s", repo, tag) || p == fmt.Sprintf("/v2/%s/manifests/%s", repo, digest(manifest)):
			w.Header().Set("Content-Type", "application/vnd.docker.distribution.manifest.v2+json")
			w.Header().Set("Docker-Content-Digest", digest(manifest))
			w.Header().Set("Content-Length", fmt.Sprint(len(manifest)))
			if r.Method != http.MethodHead {
				w.Write(manifest)
			}
		case strings.HasPrefix(p, "/v2/"+repo+"/blobs/"):
			b, ok := blobs[strings.TrimPrefix(p, "/v2/"+repo+"/blobs/")]
			if !ok {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Length", fmt.Sprint(len(b)))
			w.Header().Set("Docker-Content-Digest", strings.TrimPrefix(p, "/v2/"+repo+"/blobs/"))
			if r.Method != http.MethodHead {
				w.Write(b)
			}
		default:
			http.NotFound(w, r)
		}
	}))
}

// TestPullsAMissingImageAndNeedsNothingInIt pulls an image that holds no
// program at all: the agent still starts and answers, because it depends
// on nothing in the image.
func TestPullsAMissingImageAndNeedsNothingInIt(t *testing.T) {
	needEngine(t)
	reg := fakeRegistry(t, "sandboxkit/bare", "v1")
	defer reg.Close()
	ref := strings.TrimPrefix(reg.URL, "http://") + "/sandboxkit/bare:v1"
	d := newTestDriver(t, WithImage(ref), WithPull(PullMissing))
	t.Cleanup(func() {
		_, _ = d.cli.ImageRemove(context.Background(), ref, image.RemoveOptions{Force: true, PruneChildren: true})
	})
	var mu sync.Mutex
	var progress []string
	inst, err := d.Start(testCtx(t), driver.Config{ID: "pull-" + randID(), Progress: func(s string) {
		mu.Lock()
		progress = append(progress, s)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatalf("Start with a pull: %v", err)
	}
	defer inst.Close(context.Background())
	cl, err := agent.Dial(testCtx(t), inst.Conn(), wire.Hello{Workspace: workspacePath})
	if err != nil {
		t.Fatalf("handshake with the agent in an empty image: %v", err)
	}
	defer cl.Close()
	if h := cl.Hello(); !h.PID1 || h.Python != "" || h.Bash != "" {
		t.Errorf("hello %+v, want PID 1 and no python or bash in this image", h)
	}
	mu.Lock()
	defer mu.Unlock()
	all := strings.Join(progress, "\n")
	for _, want := range []string{"pulling image " + ref, "Pull complete", "pulled image " + ref} {
		if !strings.Contains(all, want) {
			t.Errorf("progress %q lacks %q", progress, want)
		}
	}
}
