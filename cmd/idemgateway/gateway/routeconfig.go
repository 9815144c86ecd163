package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"time"
)

// routeSettings is one entry of the -route-config file: a route of
// -routes' form and the settings that replace the flags' for it. A setting
// left out is the flag's.
type routeSettings struct {
	Route           string    `json:"route"`
	Methods         []string  `json:"methods"`
	TTL             *duration `json:"ttl"`
	Lease           *duration `json:"lease"`
	Wait            *duration `json:"wait"`
	MaxBody         *int64    `json:"max_body"`
	MaxResponse     *int      `json:"max_response"`
	UpstreamTimeout *duration `json:"upstream_timeout"`
	UnknownOutcome  *string   `json:"unknown_outcome"`
	StoredHeaders   []string  `json:"stored_headers"`
}

// duration is a time.Duration written as Go writes it ("10s", "24h").
type duration time.Duration

func (d *duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a string such as \"10s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = duration(v)
	return nil
}

// loadRouteConfig reads -route-config: for each entry, a copy of c with the
// entry's settings, checked as the flags are (the time bounds, the stored
// headers), its route added to c.routes.
func (c *config) loadRouteConfig() error {
	b, err := os.ReadFile(c.routeConfig)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var entries []routeSettings
	if err := dec.Decode(&entries); err != nil {
		return fmt.Errorf("%s: want a JSON array of {\"route\": …, settings}: %w", c.routeConfig, err)
	}
	var errs []error
	seen := map[string]bool{}
	for i, e := range entries {
		bad := func(name, format string, args ...any) {
			errs = append(errs, fmt.Errorf("%s: entry %d (route %q): %s: %s", c.routeConfig, i, e.Route, name, fmt.Sprintf(format, args...)))
		}
		if e.Route == "" {
			bad("route", "required: a ServeMux pattern, e.g. \"POST /charges\"")
			continue
		}
		if seen[lowerPattern(e.Route)] {
			bad("route", "given twice")
			continue
		}
		seen[lowerPattern(e.Route)] = true
		rc := *c
		rc.routes, rc.perRoute = []string{e.Route}, nil
		if e.Methods != nil {
			if len(e.Methods) == 0 {
				bad("methods", "empty: leave it out for -methods")
			}
			rc.methods = e.Methods
		}
		set := func(dst *time.Duration, src *duration) {
			if src != nil {
				*dst = time.Duration(*src)
			}
		}
		set(&rc.ttl, e.TTL)
		set(&rc.lease, e.Lease)
		set(&rc.wait, e.Wait)
		set(&rc.upstreamTimeout, e.UpstreamTimeout)
		if e.MaxBody != nil {
			rc.maxBody = *e.MaxBody
		}
		if e.MaxResponse != nil {
			rc.maxResponse = *e.MaxResponse
		}
		if e.UnknownOutcome != nil {
			rc.unknownOutcome = *e.UnknownOutcome
			if rc.unknownOutcome != "keep" && rc.unknownOutcome != "release" {
				bad("unknown_outcome", "%q: want keep or release", rc.unknownOutcome)
			}
		}
		if e.StoredHeaders != nil {
			rc.storedHeaders = e.StoredHeaders
			for _, h := range e.StoredHeaders {
				if never[http.CanonicalHeaderKey(h)] {
					bad("stored_headers", "%s is never stored", h)
				}
			}
		}
		rc.timeBounds(func(name, format string, args ...any) { bad(name, format, args...) })
		c.perRoute = append(c.perRoute, &rc)
		if !slices.Contains(c.routes, e.Route) {
			c.routes = append(c.routes, e.Route)
		}
	}
	return errors.Join(errs...)
}

// settingsFor returns the configuration of the route pattern: its entry of
// -route-config, or c.
func (c *config) settingsFor(pattern string) *config {
	for _, rc := range c.perRoute {
		if rc.routes[0] == pattern {
			return rc
		}
	}
	return c
}
