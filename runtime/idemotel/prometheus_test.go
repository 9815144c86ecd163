package idemotel_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemotel"
	"github.com/idemgen/idemgen/runtime/memstore"
)

// exporterOutput runs calls of every common outcome, a sweep and a size
// observation through the OpenTelemetry Prometheus exporter and returns
// its text exposition: the series the alert rules and the dashboard in
// deploy/ are written against.
func exporterOutput(t *testing.T) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	opts := []idemotel.Option{idemotel.WithMeterProvider(mp), idemotel.WithStoreName("pgstore")}
	st := memstore.New(memstore.WithMaxRecords(1000))
	ex := idem.NewExecutor(st, idemotel.Instrument(opts...), idem.SingleTenant())
	m := &idem.Method{Op: "billing.Charge", TTL: time.Hour, Lease: time.Minute}
	ctx := context.Background()
	call := func(key, payload string) {
		var k idem.KeyParts
		k.String("id", key)
		var h idem.Hasher
		h.String(payload)
		_, _ = idem.Do(ctx, ex, m, &k, &h, func(context.Context) (string, error) { return "ok", nil })
	}
	call("a", "p")
	call("a", "p") // replayed
	call("a", "q") // conflict
	observe, err := idemotel.SweepObserver(opts...)
	if err != nil {
		t.Fatal(err)
	}
	observe(idem.SweepEvent{Removed: 3, Batches: 1})
	observe(idem.SweepEvent{Err: errors.New("down")})
	r, err := idemotel.ObserveSize(st, 1000, 1<<20, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Unregister() })
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, f := range fams {
		if _, err := expfmt.MetricFamilyToText(&b, f); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// promNames are the metric and label names a PromQL text uses: the
// metric names (idem_…, with a histogram's _sum, _count and _bucket cut),
// the label names it matches or groups by, and the values it matches
// idem_outcome and idem_event with.
func promNames(expr string) (metrics, labels, outcomes, events []string) {
	for _, m := range regexp.MustCompile(`\bidem_[a-z_]+`).FindAllString(expr, -1) {
		if strings.HasPrefix(m, "idem_op") || strings.HasPrefix(m, "idem_store_name") || m == "idem_outcome" ||
			m == "idem_event" || m == "idem_store_operation" {
			continue // a label
		}
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if strings.HasSuffix(m, "_seconds"+suf) {
				m = strings.TrimSuffix(m, suf)
			}
		}
		metrics = append(metrics, m)
	}
	for _, m := range regexp.MustCompile(`([a-z_]+)\s*(?:=~|!=|=)\s*"`).FindAllStringSubmatch(expr, -1) {
		labels = append(labels, m[1])
	}
	for _, m := range regexp.MustCompile(`by \(([a-z_, ]+)\)`).FindAllStringSubmatch(expr, -1) {
		for l := range strings.SplitSeq(m[1], ",") {
			labels = append(labels, strings.TrimSpace(l))
		}
	}
	for _, m := range regexp.MustCompile(`idem_outcome="([a-z_]+)"`).FindAllStringSubmatch(expr, -1) {
		outcomes = append(outcomes, m[1])
	}
	for _, m := range regexp.MustCompile(`idem_event="([a-z_]+)"`).FindAllStringSubmatch(expr, -1) {
		events = append(events, m[1])
	}
	return
}

// TestAlertRulesMatchExporter checks that every metric and label that
// deploy/prometheus/idem-alerts.yml and deploy/grafana/idemgen.json use is
// one the OpenTelemetry Prometheus exporter writes for idemotel's
// instruments, and that the outcomes and events they match are idemotel's
// and the executor's: a renamed instrument or attribute fails here, not in
// production. (promtool tests the rules' logic: make test-rules.)
func TestAlertRulesMatchExporter(t *testing.T) {
	out := exporterOutput(t)
	families := map[string]bool{}
	labels := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			families[strings.Fields(f)[0]] = true
		}
		for _, m := range regexp.MustCompile(`[{,]([a-z_]+)="`).FindAllStringSubmatch(line, -1) {
			labels[m[1]] = true
		}
	}
	for _, h := range []string{"idem_call_duration_seconds", "idem_store_operation_duration_seconds", "idem_method_duration_seconds"} {
		if !families[h] {
			t.Fatalf("the exporter wrote no %s; it wrote:\n%s", h, out)
		}
	}
	outcomes := []string{idemotel.OutcomeExecuted, idemotel.OutcomeTakenOver, idemotel.OutcomeReplayed, idemotel.OutcomeConflict,
		idemotel.OutcomeInProgress, idemotel.OutcomeMissingKey, idemotel.OutcomeReleased, idemotel.OutcomeLeaseLost,
		idemotel.OutcomeStoreError, idemotel.OutcomeOutcomeNotStored, idemotel.OutcomeUndecodable, idemotel.OutcomeCanceled,
		idemotel.OutcomeRejected}
	var events []string
	for k := idem.EventKind(1); !strings.HasPrefix(k.String(), "event("); k++ {
		events = append(events, k.String())
	}
	labels["error_type"] = true // the sweeper's failed rounds (TestSweepAndSizeMetrics)
	for _, file := range []string{"../../deploy/prometheus/idem-alerts.yml", "../../deploy/grafana/idemgen.json"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var exprs []string
		for _, m := range regexp.MustCompile(`(?m)"?expr"?: (?:\|\n((?:\s{10,}.*\n)+)|(.*))`).FindAllStringSubmatch(string(b), -1) {
			exprs = append(exprs, m[1]+m[2])
		}
		if len(exprs) < 8 {
			t.Fatalf("%s: found %d expressions", file, len(exprs))
		}
		for _, e := range exprs {
			ms, ls, outs, evs := promNames(e)
			for _, m := range ms {
				if !families[m] {
					t.Errorf("%s: %s is not a metric the exporter writes (expr %s)", file, m, e)
				}
			}
			for _, l := range ls {
				if !labels[l] {
					t.Errorf("%s: label %s is not one the exporter writes (expr %s)", file, l, e)
				}
			}
			for _, o := range outs {
				if !slices.Contains(outcomes, o) {
					t.Errorf("%s: idem_outcome=%q is not an idemotel outcome", file, o)
				}
			}
			for _, ev := range evs {
				if !slices.Contains(events, ev) {
					t.Errorf("%s: idem_event=%q is not an executor event", file, ev)
				}
			}
		}
	}
}
