package gateway

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	"google.golang.org/protobuf/proto"

	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// otlpReceiver is an OTLP/HTTP collector on loopback: it decodes the
// protobuf bodies of /v1/traces and /v1/metrics and keeps what they name.
type otlpReceiver struct {
	srv *httptest.Server

	mu       sync.Mutex
	spans    map[string]int // span name → count
	metrics  map[string]int // metric name → data points
	services map[string]bool
	errs     []string
}

func newOTLPReceiver(t *testing.T, status int) *otlpReceiver {
	rc := &otlpReceiver{spans: map[string]int{}, metrics: map[string]int{}, services: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, r *http.Request) {
		var req coltracepb.ExportTraceServiceRequest
		if !rc.decode(w, r, &req) {
			return
		}
		rc.mu.Lock()
		for _, rs := range req.ResourceSpans {
			rc.service(rs.Resource)
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					rc.spans[s.Name]++
				}
			}
		}
		rc.mu.Unlock()
		rc.answer(w, status, &coltracepb.ExportTraceServiceResponse{})
	})
	mux.HandleFunc("POST /v1/metrics", func(w http.ResponseWriter, r *http.Request) {
		var req colmetricpb.ExportMetricsServiceRequest
		if !rc.decode(w, r, &req) {
			return
		}
		rc.mu.Lock()
		for _, rm := range req.ResourceMetrics {
			rc.service(rm.Resource)
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					rc.metrics[m.Name] += len(m.GetSum().GetDataPoints()) + len(m.GetHistogram().GetDataPoints()) + len(m.GetGauge().GetDataPoints())
				}
			}
		}
		rc.mu.Unlock()
		rc.answer(w, status, &colmetricpb.ExportMetricsServiceResponse{})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		rc.fail("unexpected request %s %s", r.Method, r.URL.Path)
		http.NotFound(w, r)
	})
	rc.srv = httptest.NewServer(mux)
	rc.srv.Config.ErrorLog = discardStdLog()
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *otlpReceiver) fail(format string, args ...any) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.errs = append(rc.errs, fmt.Sprintf(format, args...))
}

// decode reads a protobuf request body, gzipped or not.
func (rc *otlpReceiver) decode(w http.ResponseWriter, r *http.Request, m proto.Message) bool {
	if ct := r.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		rc.fail("%s: Content-Type %q, want application/x-protobuf", r.URL.Path, ct)
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			rc.fail("%s: gzip: %v", r.URL.Path, err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return false
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err == nil {
		err = proto.Unmarshal(b, m)
	}
	if err != nil {
		rc.fail("%s: %v", r.URL.Path, err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func (rc *otlpReceiver) answer(w http.ResponseWriter, status int, m proto.Message) {
	if status != http.StatusOK {
		http.Error(w, "refused by the test's collector", status)
		return
	}
	b, _ := proto.Marshal(m)
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(b)
}

// service records a resource's service.name; called with rc.mu held.
func (rc *otlpReceiver) service(r *resourcepb.Resource) {
	for _, kv := range r.GetAttributes() {
		if kv.Key == "service.name" {
			rc.services[kv.Value.GetStringValue()] = true
		}
	}
}

// TestOTLPExport: with -otlp-endpoint the gateway pushes its spans and its
// metrics over OTLP/HTTP to a collector, beside the Prometheus text of
// -metrics-path (one meter provider, two readers); what the providers
// still hold is exported at the graceful shutdown, so an interval longer
// than the test proves the flush.
func TestOTLPExport(t *testing.T) {
	rc := newOTLPReceiver(t, http.StatusOK)
	b := newChargeBackend(t)
	g := startGateway(t, deps{}, "-store", "memory", "-upstream", b.srv.URL, "-single-tenant",
		"-otlp-endpoint", rc.srv.URL, "-otlp-interval", "1h", "-metrics-path", "/metrics")
	key := idemhttp.GenerateKey()
	mustPost(t, g.url(""), key, `{}`)
	if resp, _ := mustPost(t, g.url(""), key, `{}`); resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the retry was not replayed: %v", resp.Header)
	}
	b.wantCharges(t, 1)
	resp, err := http.Get(g.url("/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(text, []byte(`idem_calls_total{`)) {
		t.Fatalf("/metrics beside OTLP lacks idem_calls_total:\n%s", text)
	}

	if err := g.stop(); err != nil {
		t.Fatalf("gateway: %v\n%s", err, g.log)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.errs) > 0 {
		t.Fatalf("the collector saw: %v", rc.errs)
	}
	if rc.spans["idem.Do"] != 2 {
		t.Errorf("idem.Do spans received: %d, want 2 (one per call); all: %v", rc.spans["idem.Do"], rc.spans)
	}
	if rc.metrics["idem.calls"] == 0 {
		t.Errorf("no idem.calls data point received; metrics: %v", rc.metrics)
	}
	if os.Getenv("OTEL_SERVICE_NAME") == "" && os.Getenv("OTEL_RESOURCE_ATTRIBUTES") == "" && (!rc.services[serviceName] || len(rc.services) != 1) {
		t.Errorf("service.name %v, want only %q", rc.services, serviceName)
	}
	if strings.Contains(g.log.String(), "OTLP export at shutdown failed") {
		t.Errorf("the shutdown logged a failed export:\n%s", g.log)
	}
}

// TestOTLPCollectorRefuses: a collector that refuses the export costs the
// spans and metrics, never a request nor the shutdown: the gateway
// answers, shuts down within its bound, and says what was lost.
func TestOTLPCollectorRefuses(t *testing.T) {
	rc := newOTLPReceiver(t, http.StatusBadRequest)
	b := newChargeBackend(t)
	g := startGateway(t, deps{}, "-store", "memory", "-upstream", b.srv.URL, "-single-tenant",
		"-otlp-endpoint", rc.srv.URL, "-otlp-interval", "1h")
	mustPost(t, g.url(""), idemhttp.GenerateKey(), `{}`)
	b.wantCharges(t, 1)
	if err := g.stop(); err != nil {
		t.Fatalf("gateway: %v\n%s", err, g.log)
	}
	if !strings.Contains(g.log.String(), "OTLP export at shutdown failed") {
		t.Errorf("the lost export was not logged:\n%s", g.log)
	}
}
