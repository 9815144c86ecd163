package gateway

import (
	"bufio"
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// metricsHandler serves what reader collects in the Prometheus text
// exposition format (version 0.0.4), so that -metrics-path can be scraped
// without an exporter: OpenTelemetry names with every character outside
// [a-zA-Z0-9_:] as "_", "_total" on monotonic sums, "_seconds" and
// "_bytes" for the units s and By, attributes as labels.
func metricsHandler(reader *sdkmetric.ManualReader) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(r.Context(), &rm); err != nil {
			http.Error(w, "collect: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		bw := bufio.NewWriter(w)
		defer bw.Flush()
		var all []metricdata.Metrics
		for _, sm := range rm.ScopeMetrics {
			all = append(all, sm.Metrics...)
		}
		slices.SortStableFunc(all, func(a, b metricdata.Metrics) int { return cmp.Compare(a.Name, b.Name) })
		for _, m := range all {
			writeMetric(bw, m)
		}
	}
}

func writeMetric(w *bufio.Writer, m metricdata.Metrics) {
	name := promName(m.Name, m.Unit)
	help := func(name, typ string) {
		if m.Description != "" {
			fmt.Fprintf(w, "# HELP %s %s\n", name, strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(m.Description))
		}
		fmt.Fprintf(w, "# TYPE %s %s\n", name, typ)
	}
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		writeSum(w, help, name, d.IsMonotonic, d.DataPoints)
	case metricdata.Sum[float64]:
		writeSum(w, help, name, d.IsMonotonic, d.DataPoints)
	case metricdata.Gauge[int64]:
		help(name, "gauge")
		writePoints(w, name, d.DataPoints)
	case metricdata.Gauge[float64]:
		help(name, "gauge")
		writePoints(w, name, d.DataPoints)
	case metricdata.Histogram[float64]:
		help(name, "histogram")
		writeHistogram(w, name, d.DataPoints)
	case metricdata.Histogram[int64]:
		help(name, "histogram")
		writeHistogram(w, name, d.DataPoints)
	}
}

func writeSum[N int64 | float64](w *bufio.Writer, help func(name, typ string), name string, monotonic bool, points []metricdata.DataPoint[N]) {
	if monotonic {
		name += "_total"
		help(name, "counter")
	} else {
		help(name, "gauge") // an up-down counter
	}
	writePoints(w, name, points)
}

func writePoints[N int64 | float64](w *bufio.Writer, name string, points []metricdata.DataPoint[N]) {
	for _, p := range points {
		fmt.Fprintf(w, "%s%s %s\n", name, labels(p.Attributes, ""), number(float64(p.Value)))
	}
}

func writeHistogram[N int64 | float64](w *bufio.Writer, name string, points []metricdata.HistogramDataPoint[N]) {
	for _, p := range points {
		var cum uint64
		for i, b := range p.Bounds {
			cum += p.BucketCounts[i]
			fmt.Fprintf(w, "%s_bucket%s %d\n", name, labels(p.Attributes, number(b)), cum)
		}
		fmt.Fprintf(w, "%s_bucket%s %d\n", name, labels(p.Attributes, "+Inf"), p.Count)
		fmt.Fprintf(w, "%s_sum%s %s\n", name, labels(p.Attributes, ""), number(float64(p.Sum)))
		fmt.Fprintf(w, "%s_count%s %d\n", name, labels(p.Attributes, ""), p.Count)
	}
}

// promName is an OpenTelemetry instrument's name as a Prometheus metric
// name, with the unit's suffix.
func promName(name, unit string) string {
	name = sanitize(name)
	switch unit {
	case "s":
		name += "_seconds"
	case "By":
		name += "_bytes"
	}
	return name
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c == '_' || c == ':' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && '0' <= c && c <= '9') {
			b[i] = '_'
		}
	}
	return string(b)
}

// labels formats a point's attributes, and le when not "", as a label set.
func labels(set attribute.Set, le string) string {
	if set.Len() == 0 && le == "" {
		return ""
	}
	var sb strings.Builder
	sb.WriteByte('{')
	iter := set.Iter()
	for iter.Next() {
		kv := iter.Attribute()
		if sb.Len() > 1 {
			sb.WriteByte(',')
		}
		sb.WriteString(sanitize(string(kv.Key)))
		sb.WriteString(`="`)
		sb.WriteString(escapeLabel(kv.Value.String()))
		sb.WriteByte('"')
	}
	if le != "" {
		if sb.Len() > 1 {
			sb.WriteByte(',')
		}
		sb.WriteString(`le="` + le + `"`)
	}
	sb.WriteByte('}')
	return sb.String()
}

func escapeLabel(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

func number(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
