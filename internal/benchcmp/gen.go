package benchcmp

import (
	"bytes"
	"context"
	"fmt"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"golang.org/x/tools/go/packages"

	"github.com/idemgen/idemgen/internal/generate"
)

// GenConfig says how to measure the generator.
type GenConfig struct {
	Root       string // the idemgen module's directory (replace target)
	Sizes      []int  // annotated methods per synthetic package
	WarmRounds int
	ColdRounds int
	Log        func(format string, args ...any)
}

// GenResult is one size's figures.
type GenResult struct {
	Methods int
	Lines   int // lines of the generated file
	// Warm: in process, warm build cache: generate.Generate against
	// packages.Load of the same package with the same mode and tags.
	Warm GroupResult
	// Cold: the idemgen binary against `go list -export -deps`, each with an
	// empty GOCACHE, alternately.
	// Both are empty when no cold pair ran (-cold-rounds 0).
	ColdIdemgen, ColdList []time.Duration
	ColdRatio             float64 // median of per-round idemgen/list
}

// synthSource writes a package of n annotated methods in three shapes (a
// pointer request with key parts and op, a value request with a literal key
// part and an integer, a final-error list).
func synthSource(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`// Package svc is a synthetic service for the generator benchmark.
package svc

import (
	"context"
	"errors"
)

// Request is a request.
type Request struct {
	ID       string
	Customer string
	Amount   int64
}

// Refund is a value request.
type Refund struct {
	Customer string
	No       int
	Amount   int64
}

// Result is a result.
type Result struct {
	ID     string
	Amount int64
}

// ErrRejected is final.
var ErrRejected = errors.New("rejected")

// Service is the service.
type Service struct{}
`)
	for i := range n {
		name := fmt.Sprintf("M%04d", i)
		switch i % 3 {
		case 0:
			fmt.Fprintf(&b, `
// %[1]s does work.
//
//idem:key=req.ID+op ttl=155s
func (s *Service) %[1]s(ctx context.Context, req *Request, op string) (*Result, error) {
	return &Result{ID: req.ID, Amount: req.Amount}, nil
}
`, name)
		case 1:
			fmt.Fprintf(&b, `
// %[1]s refunds.
//
//idem:key=r.Customer+"refund"+r.No retries=2 timeout=2s backoff=500ms downstream=2m margin=30s
//idem:final=ErrRejected inflight=wait:3s
func (s *Service) %[1]s(ctx context.Context, r Refund) (Result, error) {
	return Result{ID: r.Customer, Amount: r.Amount}, nil
}
`, name)
		default:
			fmt.Fprintf(&b, `
// %[1]s handles an event.
//
//idem:key=id ttl=7d hash=none
func (s *Service) %[1]s(ctx context.Context, id string) error {
	return nil
}
`, name)
		}
	}
	return b.Bytes()
}

func writeSynth(dir, root string, n int) error {
	if err := os.MkdirAll(filepath.Join(dir, "svc"), 0o755); err != nil {
		return err
	}
	gomod := fmt.Sprintf(`module example.com/synth

go 1.26

require github.com/idemgen/idemgen v0.0.0-00010101000000-000000000000

replace github.com/idemgen/idemgen => %s
`, root)
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
		return err
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "svc", "svc.go"), synthSource(n), 0o644)
}

func command(ctx context.Context, dir string, env []string, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out.Bytes())
	}
	return nil
}

// withEnv returns the process environment with the given variables set.
func withEnv(kv ...string) []string {
	env := os.Environ()
	for i := 0; i+1 < len(kv); i += 2 {
		env = append(env, kv[i]+"="+kv[i+1])
	}
	return env
}

// RunGen measures the generator on synthetic packages.
func RunGen(ctx context.Context, cfg GenConfig) ([]GenResult, error) {
	tmp, err := os.MkdirTemp("", "idemgen-genbench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "idemgen")
	if err := command(ctx, cfg.Root, os.Environ(), "go", "build", "-o", bin, "./cmd/idemgen"); err != nil {
		return nil, err
	}
	var results []GenResult
	for _, n := range cfg.Sizes {
		dir := filepath.Join(tmp, fmt.Sprintf("m%d", n))
		if err := writeSynth(dir, cfg.Root, n); err != nil {
			return nil, err
		}
		// Generate once and compile the result, so that what is measured
		// is a generator producing code that builds.
		if err := command(ctx, filepath.Join(dir, "svc"), os.Environ(), bin); err != nil {
			return nil, err
		}
		if err := command(ctx, dir, os.Environ(), "go", "build", "-mod=mod", "./..."); err != nil {
			return nil, err
		}
		gen, err := os.ReadFile(filepath.Join(dir, "svc", "idem_gen.go"))
		if err != nil {
			return nil, err
		}
		r := GenResult{Methods: n, Lines: bytes.Count(gen, []byte("\n"))}
		cfg.Log("generator: %d methods: %d generated lines; warm pairs", n, r.Lines)

		svcDir := filepath.Join(dir, "svc")
		genVariant := Variant{Name: "generate.Generate", Op: func(int) error {
			files, err := generate.Generate(ctx, generate.Config{Dir: svcDir})
			if err == nil && len(files) != 1 {
				err = fmt.Errorf("%d files", len(files))
			}
			return err
		}}
		loadVariant := Variant{Name: "packages.Load", Op: func(int) error {
			pkgs, err := packages.Load(&packages.Config{
				Context:    ctx,
				Mode:       packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo,
				Dir:        svcDir,
				BuildFlags: []string{"-tags=idemgen"},
				Fset:       token.NewFileSet(),
			}, ".")
			if err == nil && (len(pkgs) != 1 || len(pkgs[0].Errors) > 0) {
				err = fmt.Errorf("load: %d packages %v", len(pkgs), pkgs[0].Errors)
			}
			return err
		}}
		if cfg.WarmRounds > 0 { // else r.Warm stays unmeasured
			r.Warm, err = Run(Group{Name: fmt.Sprintf("generator/%d", n), Callers: 1, Variants: []Variant{genVariant, loadVariant}},
				Config{Rounds: cfg.WarmRounds, Round: time.Nanosecond, MinOps: 1, MaxOps: 1})
			if err != nil {
				return nil, err
			}
		}

		if cfg.ColdRounds > 0 {
			cfg.Log("generator: %d methods: cold pairs (empty GOCACHE)", n)
		}
		var ratios []float64
		for round := range cfg.ColdRounds {
			runs := []func(env []string) error{
				func(env []string) error { return command(ctx, svcDir, env, bin) },
				func(env []string) error {
					return command(ctx, svcDir, env, "go", "list", "-export", "-deps", "-tags=idemgen", ".")
				},
			}
			var took [2]time.Duration
			for s := range 2 {
				j := (round + s) % 2
				cache, err := os.MkdirTemp(tmp, "gocache-")
				if err != nil {
					return nil, err
				}
				env := withEnv("GOCACHE", cache)
				start := time.Now()
				err = runs[j](env)
				took[j] = time.Since(start)
				_ = os.RemoveAll(cache)
				if err != nil {
					return nil, err
				}
			}
			r.ColdIdemgen = append(r.ColdIdemgen, took[0])
			r.ColdList = append(r.ColdList, took[1])
			ratios = append(ratios, float64(took[0])/float64(took[1]))
		}
		if len(ratios) > 0 {
			r.ColdRatio = median(ratios)
		}
		results = append(results, r)
	}
	return results, nil
}

// MedianDuration is the median of ds.
func MedianDuration(ds []time.Duration) time.Duration {
	xs := make([]float64, len(ds))
	for i, d := range ds {
		xs[i] = float64(d)
	}
	return time.Duration(median(xs))
}

// GenCost is what one generate.Generate of ProfileGen cost, averaged over
// its rounds.
type GenCost struct {
	Rounds int
	// Wall is the elapsed time of one Generate.
	Wall time.Duration
	// CPU is the CPU time (user and system) of this process during one
	// Generate: the generator's own work and the in-process part of
	// packages.Load, not the go command it runs; zero when CPUKnown is
	// false.
	CPU      time.Duration
	CPUKnown bool
	// AllocBytes and Allocs are the heap allocations of one Generate.
	AllocBytes, Allocs uint64
}

// ProfileGen writes a CPU profile of generate.Generate on a synthetic
// package of n methods, run rounds times (warm cache) between start and
// stop, and returns the cost of one Generate.
func ProfileGen(ctx context.Context, root string, n, rounds int, start func() error, stop func()) (GenCost, error) {
	cost := GenCost{Rounds: rounds}
	tmp, err := os.MkdirTemp("", "idemgen-genprof-")
	if err != nil {
		return cost, err
	}
	defer os.RemoveAll(tmp)
	if err := writeSynth(tmp, root, n); err != nil {
		return cost, err
	}
	dir := filepath.Join(tmp, "svc")
	if _, err := generate.Generate(ctx, generate.Config{Dir: dir}); err != nil {
		return cost, err
	}
	if err := start(); err != nil {
		return cost, err
	}
	defer stop()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	cpu0, ok0 := processCPU()
	begin := time.Now()
	for range rounds {
		if _, err := generate.Generate(ctx, generate.Config{Dir: dir}); err != nil {
			return cost, err
		}
	}
	wall := time.Since(begin)
	cpu1, ok1 := processCPU()
	runtime.ReadMemStats(&after)
	if rounds > 0 {
		cost.Wall = wall / time.Duration(rounds)
		cost.CPUKnown = ok0 && ok1
		if cost.CPUKnown {
			cost.CPU = (cpu1 - cpu0) / time.Duration(rounds)
		}
		cost.AllocBytes = (after.TotalAlloc - before.TotalAlloc) / uint64(rounds)
		cost.Allocs = (after.Mallocs - before.Mallocs) / uint64(rounds)
	}
	return cost, nil
}
