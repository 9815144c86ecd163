// Package sweepbench is what the expiry benchmarks share
// (internal/cmd/benchgrowth for pgstore, internal/cmd/mysqlsweep for
// mysqlstore): the settings of a paced sweeper (-paced), the two kinds of
// expiry they measure, and the percentiles they report.
package sweepbench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Pacing is the settings of a paced sweeper (-paced).
type Pacing struct {
	Batch int           // idem.WithSweepBatch
	Duty  float64       // idem.WithSweepDutyCycle
	Pause time.Duration // idem.WithSweepPause
}

// String is the form ParsePacing reads: batch:duty:pause.
func (p Pacing) String() string { return fmt.Sprintf("%d:%v:%v", p.Batch, p.Duty, p.Pause) }

// DefaultPacing is idem.NewSweeper's own settings, as -paced takes them.
var DefaultPacing = Pacing{Batch: idem.DefaultSweepBatch, Duty: idem.DefaultSweepDutyCycle}.String()

// ParsePacing reads -paced: batch:duty:pause entries separated by commas.
func ParsePacing(v string) ([]Pacing, error) {
	var out []Pacing
	for e := range strings.SplitSeq(v, ",") {
		f := strings.Split(e, ":")
		if len(f) != 3 {
			return nil, fmt.Errorf("-paced %q: want batch:duty:pause, e.g. 1000:0.25:0s", e)
		}
		var p Pacing
		var err error
		if p.Batch, err = strconv.Atoi(f[0]); err != nil || p.Batch <= 0 {
			return nil, fmt.Errorf("-paced %q: batch must be an integer > 0", e)
		}
		if p.Duty, err = strconv.ParseFloat(f[1], 64); err != nil || !(p.Duty > 0 && p.Duty <= 1) {
			return nil, fmt.Errorf("-paced %q: duty cycle must be in (0, 1]", e)
		}
		if p.Pause, err = time.ParseDuration(f[2]); err != nil || p.Pause < 0 {
			return nil, fmt.Errorf("-paced %q: pause must be a duration >= 0", e)
		}
		out = append(out, p)
	}
	return out, nil
}

// Loop is expiry without pacing: Sweep(batch) again while it removes its
// limit, as a bare loop that fell behind runs it.
func Loop(ctx context.Context, s idem.Sweepable, batch int) (removed int, err error) {
	for {
		n, err := s.Sweep(ctx, batch)
		removed += n
		if err != nil || n < batch {
			return removed, err
		}
	}
}

// Paced is expiry as a service runs it: an idem.Sweeper's rounds, back to
// back (as one that fell behind would run them, but for its interval),
// until a round ends with nothing left.
func Paced(ctx context.Context, p Pacing, s idem.Sweepable) (removed int, err error) {
	more := false
	sw := idem.NewSweeper(s, idem.WithSweepBatch(p.Batch), idem.WithSweepDutyCycle(p.Duty),
		idem.WithSweepPause(p.Pause), idem.WithSweepObserver(func(ev idem.SweepEvent) { more = ev.More }))
	for {
		n, err := sw.Round(ctx)
		removed += n
		if err != nil || !more {
			return removed, err
		}
	}
}

// Window calls call again and again until window has passed and done (if
// not nil) is closed, and returns call's first error; call is told whether
// done was open when it began (the call ran during the expiry).
func Window(window time.Duration, done <-chan struct{}, call func(during bool) error) error {
	end := time.Now().Add(window)
	for {
		during := false
		if done != nil {
			select {
			case <-done:
			default:
				during = true
			}
		}
		if !during && time.Now().After(end) {
			return nil
		}
		if err := call(during); err != nil {
			return err
		}
	}
}

// Percentiles sorts d and returns its median and 99th percentile (zero
// for none).
func Percentiles(d []time.Duration) (p50, p99 time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	slices.Sort(d)
	return d[len(d)/2], d[min(len(d)-1, len(d)*99/100)]
}
