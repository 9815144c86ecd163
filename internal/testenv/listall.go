package testenv

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// ListAll pages through list from q to the last page and returns the hex
// IDs of the entries listed and the number of calls; an entry listed twice
// fails the test. each, unless nil, sees every entry.
func ListAll(t testing.TB, list func(idem.ListQuery) (idem.Page, error), q idem.ListQuery, each func(idem.Entry)) (map[string]bool, int) {
	t.Helper()
	got, calls := map[string]bool{}, 0
	for {
		calls++
		p, err := list(q)
		if err != nil {
			t.Fatalf("list (call %d): %v", calls, err)
		}
		for _, e := range p.Entries {
			if got[e.Key.Hex()] {
				t.Fatalf("%s listed twice", e.Key.Hex())
			}
			got[e.Key.Hex()] = true
			if each != nil {
				each(e)
			}
		}
		if p.Next == "" {
			return got, calls
		}
		q.Cursor = p.Next
	}
}

// CheckStuckPages pages every stuck record of a table filled as the
// listing plan tests fill it (records 1 … n, record i stuck when i % 5000
// is 7), two at a time through a store whose List reads at most budget
// records per call: short or empty pages while the budget runs out, then
// the next, and exactly the stuck ones in all, none twice.
func CheckStuckPages(t testing.TB, list func(idem.ListQuery) (idem.Page, error), n, budget int) {
	t.Helper()
	want := 0
	for i := 1; i <= n; i++ {
		if i%5000 == 7 {
			want++
		}
	}
	got, calls := ListAll(t, list, idem.ListQuery{Stuck: true, Limit: 2}, func(e idem.Entry) {
		if !e.Stuck() {
			t.Fatalf("%s is not stuck", e.Key.Hex())
		}
	})
	if len(got) != want {
		t.Errorf("%d stuck records listed, want every one of %d (%d calls)", len(got), want, calls)
	}
	if calls < n/budget {
		t.Errorf("%d calls for %d records: a call read more than the budget of %d", calls, n, budget)
	}
}

// ListPlanRows is how many records the listing plan tests (pgstore's and
// mysqlstore's TestListPlan) load: $IDEM_LIST_PLAN_ROWS, or 2×10⁴ (the
// plans of docs/decisions/operator-records.md were taken at 10⁶ and 10⁷
// with it set).
func ListPlanRows(t testing.TB) int {
	t.Helper()
	v := os.Getenv("IDEM_LIST_PLAN_ROWS")
	if v == "" {
		return 20000
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("IDEM_LIST_PLAN_ROWS=%q: want a number of records", v)
	}
	return n
}

// ListPlanQuery is one listing whose plan the SQL stores' TestListPlan
// explains.
type ListPlanQuery struct {
	Name string
	Q    idem.ListQuery
}

// ListPlanQueries are the listings whose plans pgstore's and mysqlstore's
// TestListPlan explain, over the records loaded for them (operations op-0
// to op-9).
func ListPlanQueries() []ListPlanQuery {
	return []ListPlanQuery{
		{"newest 50 of one operation", idem.ListQuery{Op: "op-3"}},
		{"newest 50 of every operation", idem.ListQuery{}},
		{"stuck, one operation", idem.ListQuery{Op: "op-7", Stuck: true}},
		{"stuck, every operation", idem.ListQuery{Stuck: true}},
		{"FAILED_FINAL of the last hour, one operation", idem.ListQuery{Op: "op-3", Status: idem.StatusFailedFinal, MaxAge: time.Hour}},
		{"one operation, second page", idem.ListQuery{Op: "op-3", Cursor: idem.ListCursor(idem.Entry{Created: time.Now().Add(-time.Second)})}},
	}
}
