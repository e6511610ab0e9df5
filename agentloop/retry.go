package agentloop

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	goopenai "github.com/sashabaranov/go-openai"

	"github.com/sandboxkit/sandboxkit/adapters/openaitools"
)

// RetryPolicy says how failed model calls are retried. The zero value means the defaults.
type RetryPolicy struct {
	// MaxRetries is how many times a failed call is tried again (default 5; negative: never).
	MaxRetries int
	// BaseDelay is the wait before the first retry, doubled for each further one (default 1s).
	BaseDelay time.Duration
	// MaxDelay caps one backoff wait (default 30s). A Retry-After header is not capped by
	// it: the server knows better.
	MaxDelay time.Duration
	// MaxRetryAfter is the longest Retry-After honoured (default 2m). A server asking for a
	// longer wait ends the run with its error instead of hanging it.
	MaxRetryAfter time.Duration
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxRetries == 0 {
		p.MaxRetries = 5
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = time.Second
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = 30 * time.Second
	}
	if p.MaxRetryAfter <= 0 {
		p.MaxRetryAfter = 2 * time.Minute
	}
	return p
}

// backoff returns the wait before retry number n (from 0): exponential, capped, with jitter
// over its upper half so that clients failing together do not come back together.
func (p RetryPolicy) backoff(n int) time.Duration {
	d := p.BaseDelay << min(n, 30)
	if d <= 0 || d > p.MaxDelay {
		d = p.MaxDelay
	}
	return d/2 + rand.N(d/2+1)
}

// retryable reports whether a failed model call may succeed if tried again.
func retryable(err error) bool {
	var apiErr *goopenai.APIError
	if errors.As(err, &apiErr) {
		if apiErr.HTTPStatusCode == 0 {
			// An error event inside a stream that began with 200: the server failed while
			// answering. Only a complaint about the request itself is worth no retry.
			switch apiErr.Type {
			case "invalid_request_error", "authentication_error", "permission_error", "not_found_error":
				return false
			}
			return true
		}
		return retryableStatus(apiErr.HTTPStatusCode)
	}
	var reqErr *goopenai.RequestError
	if errors.As(err, &reqErr) && reqErr.HTTPStatusCode != 0 {
		return retryableStatus(reqErr.HTTPStatusCode)
	}
	if errors.Is(err, openaitools.ErrIncompleteStream) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EPIPE) {
		return true
	}
	var netErr net.Error
	return errors.As(err, &netErr)
}

func retryableStatus(code int) bool {
	return code == http.StatusRequestTimeout || code == http.StatusConflict ||
		code == http.StatusTooManyRequests || code >= 500
}

// NewClient returns a go-openai client for cfg that also lets the loop read the Retry-After
// header of a failed response, which go-openai's errors do not carry. Use it instead of
// goopenai.NewClientWithConfig for an [Agent]; any other use of the client is unaffected.
func NewClient(cfg goopenai.ClientConfig) *goopenai.Client {
	next := cfg.HTTPClient
	if next == nil {
		next = &http.Client{}
	}
	cfg.HTTPClient = hintDoer{next: next}
	return goopenai.NewClientWithConfig(cfg)
}

// hintKey carries a *retryHint in a request's context from the loop to hintDoer.
type hintKey struct{}

// retryHint is where hintDoer leaves the wait a failed response asked for.
type retryHint struct {
	mu    sync.Mutex
	after time.Duration
	ok    bool
}

func (h *retryHint) set(d time.Duration) {
	h.mu.Lock()
	h.after, h.ok = d, true
	h.mu.Unlock()
}

func (h *retryHint) get() (time.Duration, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.after, h.ok
}

// hintDoer passes requests on and notes the Retry-After of failed responses in the hint
// the request's context carries.
type hintDoer struct {
	next goopenai.HTTPDoer
}

func (d hintDoer) Do(req *http.Request) (*http.Response, error) {
	resp, err := d.next.Do(req)
	if err != nil || resp.StatusCode < 400 {
		return resp, err
	}
	if h, ok := req.Context().Value(hintKey{}).(*retryHint); ok {
		if after, ok := parseRetryAfter(resp.Header, time.Now()); ok {
			h.set(after)
		}
	}
	return resp, nil
}

// parseRetryAfter reads retry-after-ms (OpenAI's, precise) or Retry-After (seconds or an
// HTTP date).
func parseRetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if v := strings.TrimSpace(h.Get("retry-after-ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 {
			return time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
		return time.Duration(s * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// errRetryAfterTooLong is returned when the server asks for a longer wait than the policy
// accepts.
func errRetryAfterTooLong(after, limit time.Duration, err error) error {
	return fmt.Errorf("agentloop: the endpoint asks to retry after %v, longer than RetryPolicy.MaxRetryAfter (%v): %w", after, limit, err)
}
