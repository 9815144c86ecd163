package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// sampleLine is a sample of the Prometheus text format: a name, labels
// with quoted, escaped values, and a number.
var sampleLine = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\["\\n])*",?)*\})? (-?[0-9.e+-]+|\+Inf|-Inf|NaN)$`)

// wantExposition checks that every line of text is a comment or a sample.
func wantExposition(t *testing.T, text string) {
	t.Helper()
	for line := range strings.SplitSeq(strings.TrimSpace(text), "\n") {
		if !strings.HasPrefix(line, "# HELP ") && !strings.HasPrefix(line, "# TYPE ") && !sampleLine.MatchString(line) {
			t.Errorf("not in the text format: %q", line)
		}
	}
}

// TestMetricsPath: with -metrics-path, the executor's metrics are served
// there in the Prometheus text format: calls by outcome as a counter, call
// durations as a histogram, claims in flight as a gauge.
func TestMetricsPath(t *testing.T) {
	b := newChargeBackend(t)
	g := startGateway(t, deps{}, "-store", "memory", "-upstream", b.srv.URL, "-single-tenant", "-metrics-path", "/metrics")
	key := idemhttp.GenerateKey()
	mustPost(t, g.url(""), key, `{}`)
	mustPost(t, g.url(""), key, `{}`)
	resp, err := http.Get(g.url("/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	text := string(body)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("%d %v", resp.StatusCode, resp.Header)
	}
	wantExposition(t, text)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^# TYPE idem_calls_total counter$`),
		regexp.MustCompile(`(?m)^idem_calls_total\{[^}]*idem_outcome="executed"[^}]*\} 1$`),
		regexp.MustCompile(`(?m)^idem_calls_total\{[^}]*idem_outcome="replayed"[^}]*\} 1$`),
		regexp.MustCompile(`(?m)^idem_calls_total\{[^}]*idem_store_name="memory"`),
		regexp.MustCompile(`(?m)^# TYPE idem_call_duration_seconds histogram$`),
		regexp.MustCompile(`(?m)^idem_call_duration_seconds_bucket\{[^}]*idem_outcome="executed"[^}]*le="\+Inf"\} 1$`),
		regexp.MustCompile(`(?m)^idem_call_duration_seconds_count\{[^}]*idem_outcome="replayed"[^}]*\} 1$`),
		regexp.MustCompile(`(?m)^# TYPE idem_claims_active gauge$`),
	} {
		if !want.MatchString(text) {
			t.Errorf("no line matches %s in\n%s", want, text)
		}
	}
	// Without the flag, nothing is served there: it is the backend's path.
	g2 := startGateway(t, deps{}, "-store", "memory", "-upstream", b.srv.URL, "-single-tenant")
	if resp, err := http.Get(g2.url("/metrics")); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("without -metrics-path: %v %v, want the backend's 404", resp, err)
	}
}

// TestMetricsFormat: names and label values are written in the text
// format whatever they hold, and histogram buckets are cumulative.
func TestMetricsFormat(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	m := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("test")
	c, _ := m.Int64Counter("a.b-c", metric.WithDescription("line one\nline \\ two"))
	c.Add(context.Background(), 3, metric.WithAttributes(attribute.String("k.x", "quote \" backslash \\ newline \n")))
	h, _ := m.Float64Histogram("lat", metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(0.1, 1))
	for _, v := range []float64{0.05, 0.5, 0.7, 5} {
		h.Record(context.Background(), v)
	}
	w := httptest.NewRecorder()
	metricsHandler(reader)(w, httptest.NewRequest("GET", "/metrics", nil))
	text := w.Body.String()
	wantExposition(t, text)
	for _, want := range []string{
		"# HELP a_b_c_total line one\\nline \\\\ two\n# TYPE a_b_c_total counter\n",
		`a_b_c_total{k_x="quote \" backslash \\ newline \n"} 3` + "\n",
		"lat_seconds_bucket{le=\"0.1\"} 1\nlat_seconds_bucket{le=\"1\"} 3\nlat_seconds_bucket{le=\"+Inf\"} 4\nlat_seconds_sum 6.25\nlat_seconds_count 4\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("want %q in\n%s", want, text)
		}
	}
}
