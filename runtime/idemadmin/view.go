package idemadmin

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemgen/idemgen/runtime/idem"
)

// EntryView is an idem.Entry as JSON: what the handler serves and
// cmd/idemctl prints with --json.
type EntryView struct {
	Key         string       `json:"key"` // the key's hex ID
	Tenant      string       `json:"tenant,omitempty"`
	Op          string       `json:"op,omitempty"`
	Text        string       `json:"text,omitempty"` // the readable key parts, where kept
	Status      string       `json:"status"`
	Stuck       bool         `json:"stuck,omitempty"`
	Token       idem.Token   `json:"token,string"` // the fencing token: pass it (and the status) to forget
	Fingerprint string       `json:"fingerprint"`
	Scheme      uint32       `json:"scheme"`
	Created     *time.Time   `json:"created,omitempty"`
	Expires     time.Time    `json:"expires"`
	LeaseUntil  *time.Time   `json:"lease_until,omitempty"`
	LeaseLeft   string       `json:"lease_left,omitempty"`
	Outcome     *OutcomeView `json:"outcome,omitempty"`
}

// OutcomeView is a stored outcome: the body as JSON when it is JSON (the
// default codec), else as text when it is UTF-8, else in hex; and what the
// record's metadata (idem.ParseMeta) keeps of the call that stored it.
type OutcomeView struct {
	Body       json.RawMessage `json:"body,omitempty"`
	BodyText   string          `json:"body_text,omitempty"`
	BodyHex    string          `json:"body_hex,omitempty"`
	ErrCode    string          `json:"err_code,omitempty"`
	ErrMessage string          `json:"err_message,omitempty"`
	// Origin is the span of the call that ran the method and stored the
	// outcome (kept by runtime/idemotel), when the record keeps one.
	Origin *OriginView `json:"origin,omitempty"`
	// MetaHex is the record's metadata in hex when Origin does not say all
	// of it: fields of a later release, or bytes this release cannot read
	// (MetaError then says why).
	MetaHex   string `json:"meta_hex,omitempty"`
	MetaError string `json:"meta_error,omitempty"`
}

// OriginView is an idem.TraceOrigin: the trace and span to look up in the
// tracing backend for the call that stored an outcome.
type OriginView struct {
	Trace       string `json:"trace"`       // the trace ID, 32 hex digits
	Span        string `json:"span"`        // the span ID, 16 hex digits
	Sampled     bool   `json:"sampled"`     // whether the span was sampled (recorded by the backend)
	Traceparent string `json:"traceparent"` // the W3C traceparent value
}

// View returns e as an EntryView.
func View(e idem.Entry) EntryView {
	v := EntryView{
		Key: e.Key.Hex(), Tenant: e.Key.Tenant, Op: e.Key.Op, Text: e.Key.Text,
		Status: e.Status.String(), Stuck: e.Stuck(), Token: e.Token,
		Fingerprint: hex.EncodeToString(e.Fingerprint[:]), Scheme: e.Scheme, Expires: e.Expires,
	}
	if !e.Created.IsZero() {
		v.Created = &e.Created
	}
	if e.Status == idem.StatusProcessing {
		v.LeaseUntil = &e.LeaseUntil
		v.LeaseLeft = e.LeaseLeft.String()
		return v
	}
	o := &OutcomeView{ErrCode: e.Outcome.ErrCode, ErrMessage: e.Outcome.ErrMessage}
	switch b := e.Outcome.Body; {
	case len(b) == 0:
	case json.Valid(b):
		o.Body = json.RawMessage(b)
	case utf8.Valid(b):
		o.BodyText = string(b)
	default:
		o.BodyHex = hex.EncodeToString(b)
	}
	viewMeta(o, e.Outcome.Meta)
	v.Outcome = o
	return v
}

// viewMeta fills in what meta keeps: its origin, decoded, and the raw bytes
// when the decoded view does not say all of them.
func viewMeta(o *OutcomeView, meta []byte) {
	if len(meta) == 0 {
		return
	}
	m, err := idem.ParseMeta(meta)
	if err != nil {
		o.MetaHex, o.MetaError = hex.EncodeToString(meta), err.Error()
		return
	}
	if t := m.Origin; t.IsValid() {
		o.Origin = &OriginView{
			Trace: hex.EncodeToString(t.TraceID[:]), Span: hex.EncodeToString(t.SpanID[:]),
			Sampled: t.Flags&1 == 1, Traceparent: t.Traceparent(),
		}
	}
	if !bytes.Equal(m.Append(nil), meta) {
		o.MetaHex = hex.EncodeToString(meta)
	}
}

// PageView is a page of List as JSON.
type PageView struct {
	Entries []EntryView `json:"entries"`
	Next    string      `json:"next,omitempty"`
}

// StatView is one count of Stats as JSON.
type StatView struct {
	Op     string `json:"op"`
	Status string `json:"status"`
	Stuck  bool   `json:"stuck,omitempty"`
	Count  int64  `json:"count"`
}

// ViewPage returns p as a PageView.
func ViewPage(p idem.Page) PageView {
	v := PageView{Entries: make([]EntryView, 0, len(p.Entries)), Next: p.Next}
	for _, e := range p.Entries {
		v.Entries = append(v.Entries, View(e))
	}
	return v
}

// ViewStats returns st as StatViews.
func ViewStats(st []idem.Stat) []StatView {
	out := make([]StatView, 0, len(st))
	for _, s := range st {
		out = append(out, StatView{Op: s.Op, Status: s.Status.String(), Stuck: s.Stuck, Count: s.Count})
	}
	return out
}

// ParseStatus reads a status by its name (PROCESSING, SUCCEEDED,
// FAILED_FINAL, any case) or number; "" is 0 (any).
func ParseStatus(s string) (idem.Status, bool) {
	for _, st := range []idem.Status{idem.StatusProcessing, idem.StatusSucceeded, idem.StatusFailedFinal} {
		if strings.EqualFold(s, st.String()) || s == string(rune('0'+st)) {
			return st, true
		}
	}
	return 0, s == ""
}
