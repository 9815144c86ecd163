package idemhttp

import (
	"encoding/json"
	"net/http"
)

// DefaultProblemBase is the default prefix of the "type" of the problem
// details the middleware answers with: the README of this package, whose
// sections are named by the rules ("missing-key", "invalid-key",
// "key-reused", "request-in-progress", "replay-not-acceptable",
// "request-too-large", "scope-too-long", "unreadable-body",
// "invalid-request", "response-not-replayable", "store-full", "store-busy",
// "tenant-over-quota", "store-unavailable", "server-misconfigured",
// "missing-tenant", "tenant-conflict", "missing-key-part"), and those of a
// wrapped method's refusal that WriteError answers ("business-key-reused",
// "business-key-in-progress").
const DefaultProblemBase = "https://github.com/idemgen/idemgen/blob/main/runtime/idemhttp/README.md#"

// Problem is an RFC 9457 problem details object, as the middleware writes
// it with Content-Type application/problem+json.
type Problem struct {
	// Type is a URI naming the rule: the problem base and the rule's anchor.
	Type string `json:"type"`
	// Title is a short, fixed summary of the rule.
	Title string `json:"title"`
	// Status is the HTTP status code.
	Status int `json:"status"`
	// Detail explains this occurrence and what the client should do.
	Detail string `json:"detail"`
}

func (m *middleware) problem(w http.ResponseWriter, status int, rule, title, detail string) {
	problem(w, m.cfg.problemBase, status, rule, title, detail)
}

func problem(w http.ResponseWriter, base string, status int, rule, title, detail string) {
	b, err := json.Marshal(Problem{Type: base + rule, Title: title, Status: status, Detail: detail})
	if err != nil {
		panic(err) // strings only: cannot happen
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Language", "en")
	h.Set("Cache-Control", "no-store")
	h.Del("Content-Length")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
