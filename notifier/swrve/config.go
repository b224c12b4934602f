package swrve

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"net/url"
	"time"

	"github.com/lockstream/lockstream/storage"
)

// Config defaults.
const (
	// DefaultURL is Swrve's Push API endpoint.
	DefaultURL = "https://service.swrve.com/push"
	// DefaultRate is how many requests a second Swrve accepts.
	DefaultRate = 300.0
	// DefaultExpectedLatency is a little over Swrve's measured mean response
	// time (p50 983 ms, mean about 1.6 s), so that the pool is rarely what
	// holds sends back at the full rate.
	DefaultExpectedLatency = 2 * time.Second
	// DefaultTimeout bounds one request; Swrve's slowest measured answer took
	// 7.7 s.
	DefaultTimeout = 15 * time.Second
	// DefaultMaxResponseBytes caps how much of an answer is read.
	DefaultMaxResponseBytes = 64 << 10
)

// Config configures a Sender.
type Config struct {
	// URL is the Swrve Push API endpoint. Defaults to DefaultURL
	// (https://service.swrve.com/push).
	URL string
	// Rate is the most requests started in any sliding second, the limit
	// Swrve enforces with 429s. Requests are paced a little below it (see
	// Sender) so that network jitter does not push Swrve's count over.
	// Defaults to DefaultRate (300).
	Rate float64
	// ExpectedLatency sizes the in-flight pool: at most Rate × ExpectedLatency
	// requests run at once (600 with the defaults); further sends wait.
	// Defaults to DefaultExpectedLatency (2s).
	ExpectedLatency time.Duration
	// Timeout bounds one request to Swrve, from connecting to reading the
	// answer; it does not count the time spent waiting for the pool or the
	// rate limiter. Defaults to DefaultTimeout (15s).
	Timeout time.Duration
	// PushKeysFile is the YAML file mapping message prototypes to Swrve push
	// keys per platform (see LoadPushKeys). Defaults to none: PushKeys is used.
	PushKeysFile string
	// PushKeys is the mapping used when PushKeysFile is empty; setting both is
	// an error. Defaults to none: every send fails with MESSAGE_PROTOTYPE_KEY.
	PushKeys PushKeys
	// MaxResponseBytes caps how much of an answer is read. Defaults to
	// DefaultMaxResponseBytes (64 KiB).
	MaxResponseBytes int64
	// Redis, when set, shares Rate with every Sender that uses the same Redis
	// and key prefix (every retrier process of a deployment): together they
	// start at most Rate requests in any second. Sends wait while Redis cannot
	// be reached. Defaults to nil: the rate holds within this process only.
	Redis *storage.Redis
}

// WithDefaults returns the config with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.URL = cmp.Or(c.URL, DefaultURL)
	c.Rate = cmp.Or(c.Rate, DefaultRate)
	c.ExpectedLatency = cmp.Or(c.ExpectedLatency, DefaultExpectedLatency)
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	c.MaxResponseBytes = cmp.Or(c.MaxResponseBytes, DefaultMaxResponseBytes)
	return c
}

// Validate reports every invalid field.
func (c Config) Validate() error {
	var errs []error
	if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("swrve config: URL must be an absolute http(s) URL, got %q", c.URL))
	}
	// The pace is (Rate-1) a second plus a burst of one (see PacedRate), so
	// below 2 it would be nothing.
	if math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) || c.Rate < 2 {
		errs = append(errs, fmt.Errorf("swrve config: Rate must be at least 2 a second, got %v", c.Rate))
	}
	if c.ExpectedLatency <= 0 {
		errs = append(errs, fmt.Errorf("swrve config: ExpectedLatency must be positive, got %s", c.ExpectedLatency))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("swrve config: Timeout must be positive, got %s", c.Timeout))
	}
	if c.MaxResponseBytes <= 0 {
		errs = append(errs, fmt.Errorf("swrve config: MaxResponseBytes must be positive, got %d", c.MaxResponseBytes))
	}
	if c.PushKeysFile != "" && c.PushKeys != nil {
		errs = append(errs, errors.New("swrve config: PushKeysFile and PushKeys are both set; set one"))
	}
	return errors.Join(errs...)
}

// PoolSize is how many requests may be in flight at once: Rate ×
// ExpectedLatency, rounded up, at least 1.
func (c Config) PoolSize() int {
	return max(1, int(math.Ceil(c.Rate*c.ExpectedLatency.Seconds())))
}
