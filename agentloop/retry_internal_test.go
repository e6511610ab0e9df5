package agentloop

import (
	"net/http"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
	tests := []struct {
		name   string
		header http.Header
		want   time.Duration
		ok     bool
	}{
		{"retry-after-ms wins", http.Header{"Retry-After-Ms": {"1500"}, "Retry-After": {"9"}}, 1500 * time.Millisecond, true},
		{"fractional ms", http.Header{"Retry-After-Ms": {"20.5"}}, 20500 * time.Microsecond, true},
		{"seconds", http.Header{"Retry-After": {"3"}}, 3 * time.Second, true},
		{"an HTTP date", http.Header{"Retry-After": {now.Add(7 * time.Second).Format(http.TimeFormat)}}, 7 * time.Second, true},
		{"a date in the past means now", http.Header{"Retry-After": {now.Add(-time.Minute).Format(http.TimeFormat)}}, 0, true},
		{"bad ms falls back to seconds", http.Header{"Retry-After-Ms": {"soon"}, "Retry-After": {"2"}}, 2 * time.Second, true},
		{"negative is ignored", http.Header{"Retry-After": {"-1"}}, 0, false},
		{"garbage is ignored", http.Header{"Retry-After": {"later"}}, 0, false},
		{"none", http.Header{}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseRetryAfter(tt.header, now)
			if got != tt.want || ok != tt.ok {
				t.Errorf("parseRetryAfter = %v, %v; want %v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestBackoffGrowsAndStaysCapped(t *testing.T) {
	p := RetryPolicy{BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second}.withDefaults()
	for n, hi := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		hi *= time.Millisecond
		for range 50 {
			if d := p.backoff(n); d < hi/2 || d > hi {
				t.Fatalf("backoff(%d) = %v, want within [%v, %v]", n, d, hi/2, hi)
			}
		}
	}
	if d := p.backoff(200); d > time.Second {
		t.Errorf("backoff(200) = %v overflows the cap", d)
	}
}
